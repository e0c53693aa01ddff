"""Cypher shared by the FalkorDB and Neo4j episode stores: the dialect and the store built on it."""
