"""Time expressions in a query, resolved to time ranges without a language model.

"What did Maria donate in December 2023?", 我去年五月去了哪里 or «Что я делал на прошлой
неделе?» names *when*; search can then prefer episodes whose timestamp falls in that range.
:func:`time_ranges` finds the expressions it understands and returns the ranges they denote
(half-open, ``[start, end)``), resolved against an anchor time for relative ones.

Each language has a module for its words and grammar (English in ``temporal_en``, Chinese in
``temporal_zh``, Russian in ``temporal_ru``); what a phrase denotes is computed once, in
``temporal_spans``, so "last week", 上周 and «на прошлой неделе» are the same days. A
language's patterns run only on a text written partly in its script that holds one of its
cheap triggers (a digit, or a word or character every expression of the language has), and
a text may mix languages.

Every range is widened by ``slack`` on both sides (people say "last week" of something eight
days ago). Expressions relative to an event ("two weeks before the wedding") need to know
when the event was and are not resolved here. Times are timezone-aware UTC.

Two cheaper tests serve questions that name no time: :func:`asks_when` tells whether a query
asks *when* something happened, and :func:`mentions_time` whether a message says when
("I adopted her last week", "we met yesterday"), which is what such a question needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from memmachine.retrieval.temporal_en import ENGLISH
from memmachine.retrieval.temporal_ru import RUSSIAN
from memmachine.retrieval.temporal_spans import Language, Spans, may_hold
from memmachine.retrieval.temporal_zh import CHINESE

__all__ = ["TimeRange", "asks_when", "mentions_time", "time_ranges"]

#: English first: where patterns of two languages could read the same text, it keeps it.
_LANGUAGES: tuple[Language, ...] = (ENGLISH, CHINESE, RUSSIAN)


@dataclass(frozen=True)
class TimeRange:
    """``[start, end)`` in UTC, and the query text it was read from."""

    start: datetime
    end: datetime
    text: str

    def __contains__(self, moment: datetime) -> bool:
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return self.start <= moment < self.end


def time_ranges(
    query: str, anchor: datetime, *, slack: timedelta = timedelta(days=0)
) -> list[TimeRange]:
    """The time ranges named in ``query``, in the order found; ``[]`` when it names none.

    ``anchor`` is "now" for relative expressions (a naive datetime is taken as UTC). Each
    range is widened by ``slack`` on both sides.
    """
    if anchor.tzinfo is None:
        anchor = anchor.replace(tzinfo=UTC)
    today = anchor.astimezone(UTC).date()
    found = Spans()
    for language in _LANGUAGES:
        if may_hold(language, query):
            language.find(query, today, found)
    return [
        TimeRange(
            start=_midnight(item.first) - slack, end=_midnight(item.last) + slack, text=item.text
        )
        for item in sorted(found.found, key=lambda item: item.start)
    ]


def asks_when(query: str) -> bool:
    """Whether ``query`` asks when something happened: in English it starts with "when", or
    asks "what/which date|day|month|year|time", or "how long ago"; in Chinese 什么时候,
    哪天, 哪一年, 几月...; in Russian «когда», «в каком году», «какого числа»..."""
    return any(
        language.script.search(query) is not None and language.asks_when(query)
        for language in _LANGUAGES
    )


def mentions_time(text: str) -> bool:
    """Whether ``text`` says when something happens: a relative day ("yesterday", "two
    weeks ago", "last Friday", "next month", 昨天, «на прошлой неделе»), "recently", or
    "in/since/during/on" a month, weekday or year, in any language this module reads."""
    return any(may_hold(language, text) and language.mentions_time(text) for language in _LANGUAGES)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
