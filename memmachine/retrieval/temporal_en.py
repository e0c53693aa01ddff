"""English time expressions: the words and grammar; the days they denote come from
:mod:`memmachine.retrieval.temporal_spans`.

* a day: ``13 October 2023``, ``October 13, 2023``, ``1 February, 2023``, ``2023-10-13``;
* a month: ``July 2023``, ``May last year``, ``May of this year``, and
  ``in/last/since/during <Month>`` without a year (the latest such month not after the
  anchor: "last May" on 2 June 2024 is May 2024);
* a year: ``in 2022``, ``during 2022``, ``of 2022``;
* relative: ``today``, ``yesterday``, ``last Tuesday`` (the latest Tuesday before the
  anchor), ``this/last week``, ``last weekend``,
  ``this/last month``, ``this/last year``, ``N days/weeks/months/years ago``. When the query
  also names a day with ``before``/``after``/``as of``/``on`` ("last weekend before April
  10, 2023"), that day is the anchor instead;
* offset from a named day: ``two weeks before August 11, 2023``, ``the week after 3 May
  2023``, ``the weekend before ...``, ``the Sunday before October 25, 2022``. Events are
  told after they happen (on LoCoMo the evidence for "the Sunday before October 25" is a
  message of October 25 saying "last Sunday"), so the range runs from the time the offset
  points at to the named day, both included.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from memmachine.retrieval import temporal_spans as spans
from memmachine.retrieval.temporal_spans import Days, Language, Spans

__all__ = ["ENGLISH"]

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
# "May last year", "May of this year": that month of the year named relative to now.
_MONTH_OF_YEAR = re.compile(
    r"\b(?P<month>January|February|March|April|May|June|July|August|September|October"
    r"|November|December),?\s+(?:of\s+)?(?P<which>last|this)\s+year\b",
    re.IGNORECASE,
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
_LAST_WEEKDAY = re.compile(
    r"\blast\s+(?P<weekday>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
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
_ANY = re.compile(r"[0-9A-Za-z]")


def _find(query: str, today: date, found: Spans) -> None:
    days: list[tuple[re.Match[str], date]] = []
    for pattern in (_DAY_FIRST, _MONTH_FIRST, _ISO_DAY):
        for match in pattern.finditer(query):
            named = _date(match)
            if named is None or not found.free(match):
                continue
            days.append((match, named))
            offset = _OFFSET.search(query[: match.start()])
            if offset is None:
                found.add(match, spans.day(named))
                continue
            # from the time the offset points at to the named day, both included
            first, last = _offset(offset, named)
            end = max(last, named + timedelta(days=1))
            found.add_span(
                offset.start(),
                match.end(),
                (min(first, named), end),
                query[offset.start() : match.end()],
            )
    for match in _MONTH_YEAR.finditer(query):
        if found.free(match):
            found.add(match, spans.month(int(match["year"]), _MONTHS[match["month"].casefold()]))
    for match in _MONTH_OF_YEAR.finditer(query):
        if found.free(match):
            back = 1 if match["which"].casefold() == "last" else 0
            month = _MONTHS[match["month"].casefold()]
            found.add(match, spans.month(today.year - back, month))
    for match in _BARE_MONTH.finditer(query):
        if found.free(match):
            found.add(match, spans.latest_month(_MONTHS[match["month"].casefold()], today))
    for match in _YEAR.finditer(query):
        if found.free(match):
            found.add(match, spans.year(int(match["year"])))

    # A named day introduced by "before"/"after"/"on" anchors the relative expressions.
    for match, named in days:
        if _ANCHORING.search(query[: match.start()]):
            today = named
            break
    for match in _AGO.finditer(query):
        if found.free(match):
            found.add(match, spans.ago(_count(match["count"]), match["unit"].casefold(), today))
    for match in _LAST_WEEKDAY.finditer(query):
        if found.free(match):
            weekday = _WEEKDAYS[match["weekday"].casefold()]
            found.add(match, spans.weekday_before(weekday, today))
    for match in _RELATIVE.finditer(query):
        if found.free(match):
            which = match["which"].casefold()
            unit = which.split()[-1]
            unit = "today" if unit == "tonight" else unit
            found.add(match, spans.relative(unit, which.startswith("this"), today))


def _offset(offset: re.Match[str], named: date) -> Days:
    """``[first, last)`` of the time ``offset`` ("two weeks before", "the weekend after",
    "the Sunday before") points at from ``named``."""
    sign = -1 if offset["direction"].casefold() != "after" else 1
    if offset["unit"]:
        span = spans.UNIT_DAYS[offset["unit"].casefold()]
        centre = named + timedelta(days=sign * _count(offset["count"]) * span)
        half = timedelta(days=max(span // 2, 1))
        return centre - half, centre + half + timedelta(days=1)
    if offset["weekday"]:
        wanted = _WEEKDAYS[offset["weekday"].casefold()]
        if sign < 0:
            moment = named - timedelta(days=(named.weekday() - wanted) % 7 or 7)
        else:
            moment = named + timedelta(days=(wanted - named.weekday()) % 7 or 7)
        return spans.day(moment)
    period = offset["period"].casefold()
    if period == "weekend":
        if sign < 0:
            saturday = named - timedelta(days=(named.weekday() - 5) % 7 or 7)
        else:
            saturday = named + timedelta(days=(5 - named.weekday()) % 7 or 7)
        return saturday, saturday + timedelta(days=2)
    length = timedelta(days=spans.UNIT_DAYS[period])
    if sign < 0:
        return named - length, named
    return named + timedelta(days=1), named + timedelta(days=1) + length


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


ENGLISH = Language(
    name="en",
    script=_ANY,
    trigger=_ANY,
    find=_find,
    asks_when=lambda text: _ASKS_WHEN.search(text) is not None,
    mentions_time=lambda text: _MENTIONS_TIME.search(text) is not None,
)
