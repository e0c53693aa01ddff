"""A :class:`~memmachine.ports.inference.TokenCounter` from a ``tokenizer.json``, on
Hugging Face's tokenizers library (a core dependency: the ONNX embedder reads its model's
tokenizer with it). For an open model served behind an OpenAI-compatible endpoint, its own
``tokenizer.json`` gives its own counts."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from memmachine.errors import ConfigurationError

__all__ = ["TokenizersTokenCounter"]


class TokenizersTokenCounter:
    """Counts with the tokenizer in ``path``: a ``tokenizer.json`` file or a directory
    holding one. Special tokens the tokenizer would add around a text are not counted."""

    def __init__(self, path: str | Path) -> None:
        file = Path(path).expanduser()
        if file.is_dir():
            file = file / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # missing, unreadable or not a tokenizer file
            raise ConfigurationError(
                f"no tokenizer could be read from {file} ({type(exc).__name__})"
            ) from exc
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.name = f"tokenizers:{file}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
