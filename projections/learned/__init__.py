"""What agents learned (procedures, facts, cached plans, feedback on memories) as a read model:
kept in each agent's Redis hash beside its working memory, read and ranked here."""
