"""OpenAI-compatible endpoints: embeddings and chat."""
