"""Runnable examples: ``uv run python -m examples.<name>`` from the repository root."""
