"""Redis: working memory, the job queue and typed agent state."""
