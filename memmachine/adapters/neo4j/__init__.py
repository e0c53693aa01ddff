"""Neo4j: the episode store."""
