"""Adapters on OpenAI's tiktoken: exact token counts for OpenAI models."""
