"""FalkorDB: the episode store, and the embedded server memmachine runs as a child process."""
