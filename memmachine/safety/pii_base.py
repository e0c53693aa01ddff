"""What every PII detector shares: the token of each kind and the edges of a match.

A detector is a compiled pattern and a replacer: the replacer gets each match and returns
the text to put in its place (its kind's token, with any label it keeps) or ``None`` to
leave the match as it is. A detector whose matches start with a label names the label's
words, and is skipped when the text holds none of them (a substring test, much cheaper than
a search of the pattern).

The edges: a match may not touch a digit or a Latin letter on either side, so that it is
never a piece of a longer number or code. A Chinese, Japanese or Cyrillic character (or any
other letter) may touch it: ``\\b`` and ``\\w`` treat a Chinese character as a word
character, so ``是11010519491231002X`` has no word boundary before the ``1``, and a pattern
built on them would miss an identifier written straight after Chinese text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

__all__ = ["AFTER", "BEFORE", "TOKENS", "Detector", "Replacer"]

TOKENS: Mapping[str, str] = {
    "email": "[EMAIL]",
    "iban": "[IBAN]",
    "card": "[CARD]",
    "national_id": "[NATIONAL_ID]",
    "account": "[ACCOUNT]",
    "phone": "[PHONE]",
}

#: Not right after a digit (any script's), a Latin letter or ``_``.
BEFORE = r"(?<![\dA-Za-z_])"
#: Not right before a digit (any script's), a Latin letter or ``_``.
AFTER = r"(?![\dA-Za-z_])"

Replacer = Callable[[re.Match[str]], str | None]


class Detector(NamedTuple):
    """A pattern, what replaces each of its matches, and the words it needs."""

    pattern: re.Pattern[str]
    replace: Replacer
    #: Run only when the lower-cased text holds one of these (a label the pattern starts
    #: with); empty: always.
    words: tuple[str, ...] = ()
