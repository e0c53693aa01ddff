"""The local file system: typed agent state as JSON files."""
