"""Token counts for budgets: the estimate memmachine uses when no tokenizer is configured,
and the set of counters one deployment uses per prompt format.

The estimate (:class:`EstimatedTokenCounter`) needs no file and no network. It splits a text
the way byte-level BPE tokenizers pre-split it (letter runs, digit runs, punctuation runs,
whitespace) and charges each piece by what such tokenizers spend on it:

* an ASCII word: one token per 4 letters (at least 1); per 2 letters when it has few vowels
  or capitals inside it (identifiers, hashes, base64), which BPE splits finely;
* digits: one token per 3 (BPE groups numbers in threes);
* punctuation: one token per 2 characters; a newline run: 1; spaces beyond the first: 1 per 2;
* any other character by its script: CJK ideographs 1.7 (common ones are one token, most
  others two or three), CJK and full-width punctuation 1, Cyrillic 0.6, Greek 1.1, other
  two-byte UTF-8 scripts (Latin accents, Arabic, Hebrew, ...) 0.9, other three-byte ones
  (kana, Hangul, Thai, Devanagari, ...) 1.3, four-byte ones (emoji, rare CJK) 2.5.

Measured against OpenAI's ``cl100k_base`` on English, code, Chinese, Japanese, Korean,
Russian, German, French, Portuguese, Vietnamese, Arabic, Hindi, Thai, Greek, emoji, JSON,
URLs, numbers, hashes and base64 (``tests/unit/prompting/test_tokens.py``), it counts from
0.9x (random letters, hashes) to 1.6x (URLs) the real count, about 1.1-1.3x on prose in any
of those languages, where ``characters / 4`` counted Chinese at a quarter of its tokens.
``o200k_base`` spends fewer tokens than ``cl100k_base`` on most scripts, so the estimate
stays on the safe side of it too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from memmachine.ports.inference import TokenCounter

__all__ = ["MESSAGE_OVERHEAD", "EstimatedTokenCounter", "TokenCounters", "estimate_tokens"]

#: Tokens charged per message (role and framing) on top of its text.
MESSAGE_OVERHEAD = 4

_PIECES = re.compile(
    r"[A-Za-z]+|[0-9]+|[ \t]+|[\r\n]+|[\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e]+|[^\x00-\x7f]"
)
_VOWELS = frozenset("aeiouyAEIOUY")
_BY_UTF8_LENGTH = {1: 1.0, 2: 0.9, 3: 1.3, 4: 2.5}


def _letters(piece: str) -> float:
    vowels = sum(char in _VOWELS for char in piece)
    inner_capitals = sum(char.isupper() for char in piece[1:])
    plain_case = inner_capitals in (0, len(piece) - 1)  # "word", "Word", "WORD"
    per_token = 4 if vowels * 4 >= len(piece) and plain_case else 2
    return max(1, math.ceil(len(piece) / per_token))


def _other_script(char: str) -> float:
    code = ord(char)
    if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF:
        return 1.7  # CJK ideographs: common ones 1 token, the rest 2 or 3
    if 0x3000 <= code <= 0x303F or 0xFF00 <= code <= 0xFF65:
        return 1.0  # CJK and full-width punctuation
    if 0x0400 <= code <= 0x04FF:  # Cyrillic
        return 0.6
    if 0x0370 <= code <= 0x03FF:  # Greek
        return 1.1
    return _BY_UTF8_LENGTH[len(char.encode("utf-8", "surrogatepass"))]


def _piece_tokens(piece: str) -> float:
    first = piece[0]
    if first.isascii():
        if first.isalpha():
            return _letters(piece)
        if first.isdigit():
            return math.ceil(len(piece) / 3)
        if first in " \t":
            return (len(piece) - 1) / 2
        if first in "\r\n":
            return 1
        return math.ceil(len(piece) / 2)
    return _other_script(first)


def estimate_tokens(text: str) -> int:
    """The estimated tokens of ``text`` (see the module docstring); ``0`` for ``""``."""
    if not text:
        return 0
    return max(1, math.ceil(sum(_piece_tokens(m.group()) for m in _PIECES.finditer(text))))


class EstimatedTokenCounter:
    """:func:`estimate_tokens` as a :class:`~memmachine.ports.inference.TokenCounter`."""

    name = "estimate"

    def count(self, text: str) -> int:
        return estimate_tokens(text)


@dataclass(frozen=True)
class TokenCounters:
    """The counter of each prompt format; compaction counts with the OpenAI one, the shape
    of the language model memmachine calls."""

    openai: TokenCounter
    anthropic: TokenCounter
    gemini: TokenCounter

    @classmethod
    def estimated(cls) -> TokenCounters:
        counter = EstimatedTokenCounter()
        return cls(openai=counter, anthropic=counter, gemini=counter)

    def for_format(self, format: str) -> TokenCounter:
        counter: TokenCounter = getattr(self, format)
        return counter

    @property
    def compaction(self) -> TokenCounter:
        return self.openai
