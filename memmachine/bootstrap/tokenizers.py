"""Turn :class:`~memmachine.config.TokenizerSettings` into the token counter of each prompt
format. A counter that cannot be built (no tiktoken, no encoding file, no tokenizer.json) is a
:class:`~memmachine.errors.ConfigurationError` at startup, never a surprise in a request."""

from __future__ import annotations

from memmachine.config import TokenizerSettings
from memmachine.ports import TokenCounter
from memmachine.prompting.tokens import EstimatedTokenCounter, TokenCounters

__all__ = ["build_token_counters"]


def build_token_counters(settings: TokenizerSettings) -> TokenCounters:
    """One counter per format; formats with the same setting share one counter."""
    built: dict[str, TokenCounter] = {}

    def counter(format: str) -> TokenCounter:
        spec = settings.spec(format)
        if spec not in built:
            built[spec] = _counter(spec)
        return built[spec]

    return TokenCounters(
        openai=counter("openai"), anthropic=counter("anthropic"), gemini=counter("gemini")
    )


def _counter(spec: str) -> TokenCounter:
    kind, _, argument = spec.partition(":")
    if kind == "tiktoken":
        from memmachine.adapters.tiktoken.tiktoken_token_counter import TiktokenTokenCounter

        return TiktokenTokenCounter(argument)
    if kind == "tokenizers":
        from memmachine.adapters.tokenizers.tokenizers_token_counter import (
            TokenizersTokenCounter,
        )

        return TokenizersTokenCounter(argument)
    return EstimatedTokenCounter()
