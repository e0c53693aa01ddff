"""Which speakers a query names: "What did Caroline research?" is about Caroline's turns."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["named_speakers"]

#: Names shorter than this are too likely to be ordinary words ("Al", "Jo" aside).
_MIN_NAME_CHARS = 2


def named_speakers(query: str, speakers: Iterable[str]) -> set[str]:
    """The speakers (as given) whose full name, or first name, appears in ``query`` as whole
    words, case-insensitively; possessives count ("Caroline's"). Empty when none does."""
    text = query.casefold()
    out: set[str] = set()
    for speaker in speakers:
        name = " ".join(speaker.split())
        if len(name) < _MIN_NAME_CHARS:
            continue
        forms = {name.casefold(), name.split()[0].casefold()}
        for form in forms:
            if len(form) >= _MIN_NAME_CHARS and re.search(
                r"(?<![^\W_])" + re.escape(form) + r"(?![^\W_])", text
            ):
                out.add(speaker)
                break
    return out
