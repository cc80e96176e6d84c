"""Read models rebuilt from the log: working memory (Redis), episodic memory (Qdrant),
the retrieval engine over both, and the query service."""
