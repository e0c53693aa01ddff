"""The texts an episode is indexed and embedded under.

Matching on the bare message loses who said it and when: "When did Caroline go to the
support group?" names the speaker, and questions often name a month. Each episode is
therefore embedded as ``"<date> <speaker>: <content>"`` (on LoCoMo this context alone lifts
dense retrieval substantially; see bench/RESULTS.md).

A message also leans on the turns before it: "Yes, adoption agencies!" answers "Have you
picked a topic to research?". :func:`window_text` is a message read after the messages before
it (the model run its vectors are pooled from, or one more derivative vector), and
:func:`indexed_text` adds the words of the messages before it that it lacks to what full-text
search matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from memmachine.indexing.language_detection import detect_language
from memmachine.indexing.terms import TERM_PATTERN, analyse

__all__ = [
    "Said",
    "WindowLayout",
    "day_text",
    "episode_search_text",
    "indexed_text",
    "window_layout",
    "window_text",
]

#: A message as context: who said it (producer, or the role without one) and what.
Said = tuple[str, str]


def episode_search_text(
    content: str, *, timestamp: datetime, producer: str | None, role: str
) -> str:
    """``"<day> <Month> <year> <speaker>: <content>"``, the speaker being the producer or,
    without one, the role."""
    speaker = producer or role
    return f"{_day(timestamp)} {speaker}: {content}"


class WindowLayout(NamedTuple):
    """A window text and where its parts are: the date ends at ``day_end``, the last
    message's line (``"<speaker>: <content>"``) starts at ``line_start`` and its content at
    ``content_start``; the line runs to the end of ``text``."""

    text: str
    day_end: int
    line_start: int
    content_start: int


def window_layout(said: Sequence[Said], *, timestamp: datetime) -> WindowLayout:
    """:func:`window_text` of ``said`` (at least one message) with the positions of its
    parts."""
    if not said:
        raise ValueError("a window needs at least the message it belongs to")
    day = _day(timestamp)
    text = window_text(said, timestamp=timestamp)
    speaker, content = said[-1]
    line_start = len(text) - len(speaker) - 2 - len(content)
    return WindowLayout(text, len(day), line_start, line_start + len(speaker) + 2)


def window_text(said: Sequence[Said], *, timestamp: datetime) -> str:
    """Messages read in order, the last being the one the window belongs to:
    ``"<day> <Month> <year> <speaker>: <content>"`` then one ``"<speaker>: <content>"`` line
    per later message. With one message it is :func:`episode_search_text`."""
    body = "\n".join(f"{speaker}: {content}" for speaker, content in said)
    return f"{_day(timestamp)} {body}"


def indexed_text(own: str, before: Sequence[str]) -> str:
    """What full-text search indexes for a message: its own search text (see
    :func:`episode_search_text`), then each word of the messages ``before`` it whose term
    (:func:`~memmachine.indexing.terms.document_terms`) the message does not already have,
    once: context helps a message be found, but never outweighs its own words."""
    language = detect_language(own)
    seen = set(analyse(own, language))
    extra: list[str] = []
    for word in TERM_PATTERN.findall(" ".join(before)):
        terms = analyse(word, language)
        if terms and terms[0] not in seen:
            seen.add(terms[0])
            extra.append(word)
    return f"{own}\n{' '.join(extra)}" if extra else own


def day_text(timestamp: datetime) -> str:
    """The date every search text and window starts with: ``"<day> <Month> <year>"``."""
    return f"{timestamp.day} {timestamp:%B %Y}"


_day = day_text
