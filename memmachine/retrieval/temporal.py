"""Time expressions in a query, resolved to time ranges without a language model.

"What did Maria donate in December 2023?" or "What did John do last weekend?" names *when*;
search can then prefer episodes whose timestamp falls in that range. :func:`time_ranges`
finds the expressions it understands and returns the ranges they denote (half-open,
``[start, end)``), resolved against an anchor time for relative ones:

* a day: ``13 October 2023``, ``October 13, 2023``, ``1 February, 2023``, ``2023-10-13``;
* a month: ``July 2023``, and ``in/last/since/during <Month>`` without a year (the latest
  such month not after the anchor: "last May" on 2 June 2024 is May 2024);
* a year: ``in 2022``, ``during 2022``, ``of 2022``;
* relative: ``today``, ``yesterday``, ``this/last week``, ``last weekend``,
  ``this/last month``, ``this/last year``, ``N days/weeks/months/years ago``. When the query
  also names a day with ``before``/``after``/``as of``/``on`` ("last weekend before April
  10, 2023"), that day is the anchor instead;
* offset from a named day: ``two weeks before August 11, 2023``, ``the week after 3 May
  2023``, ``the weekend before ...``, ``the Sunday before October 25, 2022``. Events are
  told after they happen (on LoCoMo the evidence for "the Sunday before October 25" is a
  message of October 25 saying "last Sunday"), so the range runs from the time the offset
  points at to the named day, both included.

Every range is widened by ``slack`` on both sides (people say "last week" of something eight
days ago). Expressions relative to an event ("two weeks before the wedding") need to know
when the event was and are not resolved here. Times are timezone-aware UTC.

Two cheaper tests serve questions that name no time: :func:`asks_when` tells whether a query
asks *when* something happened, and :func:`mentions_time` whether a message says when
("I adopted her last week", "we met yesterday"), which is what such a question needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

__all__ = ["TimeRange", "asks_when", "mentions_time", "time_ranges"]

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
}

_DAY_FIRST = re.compile(
    r"\b(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH.format("month") + r",?\s+"
    r"(?P<year>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_MONTH_FIRST = re.compile(
    r"\b" + _MONTH.format("month") + r"\s+(?P<day>[0-3]?\d)(?:st|nd|rd|th)?,?\s+"
    r"(?P<year>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_ISO_DAY = re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b")
_MONTH_YEAR = re.compile(
    r"\b" + _MONTH.format("month") + r",?\s+(?P<year>(?:19|20)\d\d)\b", re.IGNORECASE
)
# Without a year the month must follow a preposition and be capitalised ("in May"), so the
# verb "may" and words like "march" are not read as months.
_BARE_MONTH = re.compile(
    r"\b(?:in|last|since|during|early|late|mid|of|through)\s+(?:-\s*)?"
    r"(?P<month>January|February|March|April|May|June|July|August|September|October"
    r"|November|December)\b(?!\s*,?\s*(?:19|20)\d\d)(?!\s+[0-3]?\d\b)"
)
_YEAR = re.compile(
    r"\b(?:in|during|of|since|throughout|for)\s+(?:the\s+year\s+)?(?P<year>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_AGO = re.compile(
    r"\b(?P<count>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)"
    r"\s+(?P<unit>day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)
_RELATIVE = re.compile(
    r"\b(?P<which>today|tonight|yesterday|(?:this|last|past|previous)\s+"
    r"(?:weekend|week|month|year))\b",
    re.IGNORECASE,
)
_ASKS_WHEN = re.compile(
    r"^\W*when\b|\b(?:what|which)\s+(?:date|day|month|year|time)\b|\bhow\s+long\s+ago\b",
    re.IGNORECASE,
)
_DAY_NAMES = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_MONTH_NAMES = (
    r"january|february|march|april|may|june|july|august|september|october|november|december"
)
_MENTIONS_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|recently|lately"
    r"|(?:last|next|this|past|coming)\s+(?:week(?:end)?|month|year|night|time|summer|winter"
    rf"|spring|fall|{_DAY_NAMES})"
    rf"|(?:in|since|during|on)\s+(?:{_MONTH_NAMES}|{_DAY_NAMES}|(?:19|20)\d\d)"
    r"|(?:a|one|two|three|few|couple\s+of)\s+(?:days?|weeks?|months?|years?))\b",
    re.IGNORECASE,
)
_ANCHORING = re.compile(r"\b(?:before|after|as of|on|by)\s*$", re.IGNORECASE)
# What may stand right before a named day to move away from it.
_OFFSET = re.compile(
    r"\b(?:(?P<count>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)"
    r"\s+(?P<unit>day|week|month|year)s?"
    r"|(?:the|that)\s+(?P<period>day|week|weekend|month|year)"
    rf"|(?:the\s+)?(?P<weekday>{_DAY_NAMES})"
    r")\s+(?P<direction>before|after|prior\s+to)\s+(?:the\s+)?$",
    re.IGNORECASE,
)
_WEEKDAYS = {name: number for number, name in enumerate(_DAY_NAMES.split("|"))}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


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
    anchor = anchor.astimezone(UTC)
    found: list[tuple[int, date, date, str]] = []
    taken: list[tuple[int, int]] = []

    def free(match: re.Match[str]) -> bool:
        return all(match.end() <= a or match.start() >= b for a, b in taken)

    def add(match: re.Match[str], first: date, last: date) -> None:
        taken.append(match.span())
        found.append((match.start(), first, last, match.group(0)))

    days: list[tuple[re.Match[str], date]] = []
    for pattern in (_DAY_FIRST, _MONTH_FIRST, _ISO_DAY):
        for match in pattern.finditer(query):
            day = _date(match)
            if day is None or not free(match):
                continue
            days.append((match, day))
            offset = _OFFSET.search(query[: match.start()])
            if offset is None:
                add(match, day, day + timedelta(days=1))
                continue
            # from the time the offset points at to the named day, both included
            first, last = _offset(offset, day)
            taken.append((offset.start(), match.end()))
            end = max(last, day + timedelta(days=1))
            found.append(
                (offset.start(), min(first, day), end, query[offset.start() : match.end()])
            )
    for match in _MONTH_YEAR.finditer(query):
        if free(match):
            year, month = int(match["year"]), _MONTHS[match["month"].casefold()]
            add(match, date(year, month, 1), _next_month(year, month))
    for match in _BARE_MONTH.finditer(query):
        if free(match):
            month = _MONTHS[match["month"].casefold()]
            year = anchor.year if month <= anchor.month else anchor.year - 1
            add(match, date(year, month, 1), _next_month(year, month))
    for match in _YEAR.finditer(query):
        if free(match):
            year = int(match["year"])
            add(match, date(year, 1, 1), date(year + 1, 1, 1))

    # A named day introduced by "before"/"after"/"on" anchors the relative expressions.
    today = anchor.date()
    for match, day in days:
        if _ANCHORING.search(query[: match.start()]):
            today = day
            break
    for match in _AGO.finditer(query):
        if free(match):
            count = _count(match["count"])
            unit = match["unit"].casefold()
            span = {"day": 1, "week": 7, "month": 30, "year": 365}[unit]
            centre = today - timedelta(days=count * span)
            half = timedelta(days=max(span // 2, 1))
            add(match, centre - half, centre + half + timedelta(days=1))
    for match in _RELATIVE.finditer(query):
        if free(match):
            first, last = _relative(match["which"].casefold().split()[-1], match["which"], today)
            add(match, first, last)

    found.sort(key=lambda item: item[0])
    return [
        TimeRange(start=_midnight(first) - slack, end=_midnight(last) + slack, text=text)
        for _, first, last, text in found
    ]


def asks_when(query: str) -> bool:
    """Whether ``query`` asks when something happened: it starts with "when", or asks
    "what/which date|day|month|year|time", or "how long ago"."""
    return _ASKS_WHEN.search(query) is not None


def mentions_time(text: str) -> bool:
    """Whether ``text`` says when something happens: a relative day ("yesterday", "two
    weeks ago", "last Friday", "next month"), "recently", or "in/since/during/on" a month,
    weekday or year."""
    return _MENTIONS_TIME.search(text) is not None


def _relative(unit: str, phrase: str, today: date) -> tuple[date, date]:
    current = phrase.casefold().startswith("this")
    if unit in ("today", "tonight"):
        return today, today + timedelta(days=1)
    if unit == "yesterday":
        return today - timedelta(days=1), today
    if unit == "weekend":
        # the latest Saturday-Sunday that ended before today
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
        return saturday, saturday + timedelta(days=2)
    if unit == "week":
        monday = today - timedelta(days=today.weekday())
        return (monday, today + timedelta(days=1)) if current else (monday - timedelta(7), monday)
    if unit == "month":
        first = today.replace(day=1)
        if current:
            return first, today + timedelta(days=1)
        previous = (first - timedelta(days=1)).replace(day=1)
        return previous, first
    first = date(today.year, 1, 1)
    return (first, today + timedelta(days=1)) if current else (date(today.year - 1, 1, 1), first)


def _offset(offset: re.Match[str], day: date) -> tuple[date, date]:
    """``[first, last)`` of the time ``offset`` ("two weeks before", "the weekend after",
    "the Sunday before") points at from ``day``."""
    sign = -1 if offset["direction"].casefold() != "after" else 1
    if offset["unit"]:
        span = _UNIT_DAYS[offset["unit"].casefold()]
        centre = day + timedelta(days=sign * _count(offset["count"]) * span)
        half = timedelta(days=max(span // 2, 1))
        return centre - half, centre + half + timedelta(days=1)
    if offset["weekday"]:
        wanted = _WEEKDAYS[offset["weekday"].casefold()]
        if sign < 0:
            moment = day - timedelta(days=(day.weekday() - wanted) % 7 or 7)
        else:
            moment = day + timedelta(days=(wanted - day.weekday()) % 7 or 7)
        return moment, moment + timedelta(days=1)
    period = offset["period"].casefold()
    if period == "weekend":
        if sign < 0:
            saturday = day - timedelta(days=(day.weekday() - 5) % 7 or 7)
        else:
            saturday = day + timedelta(days=(5 - day.weekday()) % 7 or 7)
        return saturday, saturday + timedelta(days=2)
    length = timedelta(days=_UNIT_DAYS[period])
    if sign < 0:
        return day - length, day
    return day + timedelta(days=1), day + timedelta(days=1) + length


def _date(match: re.Match[str]) -> date | None:
    month_text = match["month"]
    month = int(month_text) if month_text.isdigit() else _MONTHS[month_text.casefold()]
    try:
        return date(int(match["year"]), month, int(match["day"]))
    except ValueError:
        return None


def _count(text: str) -> int:
    text = " ".join(text.casefold().split())
    return int(text) if text.isdigit() else _NUMBERS.get(text, 1)


def _next_month(year: int, month: int) -> date:
    return date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
