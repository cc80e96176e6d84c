"""Pure processing logic: importance, routing, embedding and capacities. No client libraries."""
