"""In-process search indexes in front of any episode store."""
