"""Prompts: the context memmachine hands an agent for its next model call
(:mod:`~memmachine.prompting.memory_prompt`), and the prompts memmachine itself sends to a
language model for background work (:mod:`~memmachine.prompting.llm`: summaries, fact
extraction, consolidation)."""

from __future__ import annotations

from memmachine.prompting.memory_prompt import (
    MESSAGE_OVERHEAD,
    MemoryPrompt,
    MemorySource,
    PromptFormat,
    build_memory_prompt,
    estimate_tokens,
    prompt_token_count,
)
from memmachine.prompting.tokens import EstimatedTokenCounter, TokenCounters

__all__ = [
    "MESSAGE_OVERHEAD",
    "EstimatedTokenCounter",
    "MemoryPrompt",
    "MemorySource",
    "PromptFormat",
    "TokenCounters",
    "build_memory_prompt",
    "estimate_tokens",
    "prompt_token_count",
]
