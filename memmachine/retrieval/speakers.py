"""Which speakers a query names: "What did Caroline research?" is about Caroline's turns."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["named_speakers", "without_names"]

#: Names shorter than this are too likely to be ordinary words ("Al", "Jo" aside).
_MIN_NAME_CHARS = 2


def _forms(speaker: str) -> list[str]:
    """The ways a query may name ``speaker``: the full name and the first name, casefolded,
    longest first; none for a name too short to tell from an ordinary word."""
    name = " ".join(speaker.split())
    if len(name) < _MIN_NAME_CHARS:
        return []
    forms = {name.casefold(), name.split()[0].casefold()}
    return sorted((form for form in forms if len(form) >= _MIN_NAME_CHARS), key=len, reverse=True)


def _pattern(form: str) -> str:
    return r"(?<![^\W_])" + re.escape(form) + r"(?![^\W_])"


def named_speakers(query: str, speakers: Iterable[str]) -> set[str]:
    """The speakers (as given) whose full name, or first name, appears in ``query`` as whole
    words, case-insensitively; possessives count ("Caroline's"). Empty when none does."""
    text = query.casefold()
    return {
        speaker
        for speaker in speakers
        if any(re.search(_pattern(form), text) for form in _forms(speaker))
    }


def without_names(query: str, speakers: Iterable[str]) -> str:
    """``query`` with every mention of ``speakers`` (full or first name, with a possessive
    "'s") taken out and the spacing closed up: "What activities does Melanie partake in?"
    becomes "What activities does partake in?". Among one speaker's turns the name tells
    nothing apart; left in, it pulls the query toward the turns that say it."""
    forms = sorted(
        {form for speaker in speakers for form in _forms(speaker)}, key=len, reverse=True
    )
    if not forms:
        return query
    names = "|".join(_pattern(form) for form in forms)
    stripped = re.sub(rf"(?:{names})(?:['\u2019]s\b)?", " ", query, flags=re.IGNORECASE)
    return " ".join(stripped.split())
