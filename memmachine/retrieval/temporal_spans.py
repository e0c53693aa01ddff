"""The calendar arithmetic behind time expressions, shared by every language.

Each language's module (``temporal_en``, ``temporal_zh``, ``temporal_ru``) reads its own
words and grammar and asks this module for the days they denote, as ``(first, last)``:
half-open, ``last`` excluded. What a phrase means is decided once here, so "last week",
上周 and «на прошлой неделе» are the same seven days.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

__all__ = [
    "UNIT_DAYS",
    "Days",
    "Found",
    "Language",
    "Spans",
    "ago",
    "any_of",
    "dated",
    "day",
    "latest_day",
    "latest_month",
    "may_hold",
    "month",
    "relative",
    "weekday_before",
    "weekday_of_last_week",
    "weekday_of_this_week",
    "year",
]

#: ``(first, last)``: the days from ``first`` up to, not including, ``last``.
Days = tuple[date, date]

#: The length in days of each unit an "N units ago" counts in.
UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


@dataclass(frozen=True)
class Found:
    """Days a query names, where the phrase starts in it and the phrase itself."""

    start: int
    first: date
    last: date
    text: str


@dataclass
class Spans:
    """The expressions found in one query so far: a later pattern may not read text an
    earlier one took."""

    found: list[Found] = field(default_factory=list)
    taken: list[tuple[int, int]] = field(default_factory=list)

    def free(self, match: re.Match[str]) -> bool:
        """Whether none of ``match``'s text is taken yet."""
        return all(match.end() <= a or match.start() >= b for a, b in self.taken)

    def add(self, match: re.Match[str], days: Days | None) -> None:
        """Take ``match`` as naming ``days`` (nothing when ``days`` is ``None``)."""
        if days is not None:
            self.add_span(match.start(), match.end(), days, match.group(0))

    def add_span(self, start: int, end: int, days: Days, text: str) -> None:
        """Take ``[start, end)`` of the query as naming ``days``."""
        self.taken.append((start, end))
        self.found.append(Found(start, days[0], days[1], text))


@dataclass(frozen=True)
class Language:
    """What one language's module offers: whether a text may hold its expressions (a cheap
    test, so that a text without any costs little), and its readers."""

    name: str
    #: Matches a text written at least partly in the language's script.
    script: re.Pattern[str]
    #: Matches every text that holds one of the language's expressions (and some others).
    trigger: re.Pattern[str]
    #: Adds the expressions of ``query`` to the spans, relative to ``today``.
    find: Callable[[str, date, Spans], None]
    #: Whether a query asks when something happened.
    asks_when: Callable[[str], bool]
    #: Whether a text says when something happens.
    mentions_time: Callable[[str], bool]


def day(moment: date) -> Days:
    return moment, moment + timedelta(days=1)


def month(year_number: int, month_number: int) -> Days | None:
    """The month, or ``None`` when it is no month (13, year 0)."""
    if not 1 <= month_number <= 12 or not 1 <= year_number <= 9998:
        return None
    first = date(year_number, month_number, 1)
    if month_number == 12:
        return first, date(year_number + 1, 1, 1)
    return first, date(year_number, month_number + 1, 1)


def year(year_number: int) -> Days | None:
    if not 1 <= year_number <= 9998:
        return None
    return date(year_number, 1, 1), date(year_number + 1, 1, 1)


def latest_month(month_number: int, today: date) -> Days | None:
    """The latest such month not after ``today`` ("in May" on 2 June is this May)."""
    shift = 0 if month_number <= today.month else 1
    return month(today.year - shift, month_number)


def latest_day(month_number: int, day_number: int, today: date) -> Days | None:
    """The latest such day not after ``today``; ``None`` for a day no month has."""
    for year_number in (today.year, today.year - 1, today.year - 4):
        try:
            moment = date(year_number, month_number, day_number)
        except ValueError:
            continue
        if moment <= today:
            return day(moment)
    return None


def dated(year_number: int, month_number: int, day_number: int) -> Days | None:
    """That day; its month when the day is impossible (31 February), else ``None``."""
    try:
        return day(date(year_number, month_number, day_number))
    except ValueError:
        return month(year_number, month_number)


def relative(unit: str, current: bool, today: date) -> Days:
    """``today``/``yesterday``, or this (``current``) or the last ``week``, ``weekend``,
    ``month`` or ``year``. "This" runs up to today included; "last" is the whole
    calendar unit before the current one (weeks start on Monday)."""
    if unit == "today":
        return day(today)
    if unit == "yesterday":
        return day(today - timedelta(days=1))
    if unit == "weekend":
        # the latest Saturday-Sunday that ended before today
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
        return saturday, saturday + timedelta(days=2)
    tomorrow = today + timedelta(days=1)
    if unit == "week":
        monday = today - timedelta(days=today.weekday())
        return (monday, tomorrow) if current else (monday - timedelta(days=7), monday)
    if unit == "month":
        first = today.replace(day=1)
        if current:
            return first, tomorrow
        return (first - timedelta(days=1)).replace(day=1), first
    first = date(today.year, 1, 1)
    return (first, tomorrow) if current else (date(today.year - 1, 1, 1), first)


def ago(count: int, unit: str, today: date) -> Days | None:
    """``count`` days, weeks, months or years before ``today``, widened by half a unit on
    each side (a day for days); ``None`` when that is before the calendar starts."""
    span = UNIT_DAYS[unit]
    half = timedelta(days=max(span // 2, 1))
    try:
        centre = today - timedelta(days=count * span)
        return centre - half, centre + half + timedelta(days=1)
    except OverflowError:
        return None


def weekday_before(weekday: int, today: date) -> Days:
    """The latest such weekday (0 = Monday) before ``today``: "last Tuesday"."""
    return day(today - timedelta(days=(today.weekday() - weekday) % 7 or 7))


def weekday_of_last_week(weekday: int, today: date) -> Days:
    """That weekday (0 = Monday) of the calendar week before ``today``'s."""
    monday = today - timedelta(days=today.weekday() + 7)
    return day(monday + timedelta(days=weekday))


def weekday_of_this_week(weekday: int, today: date) -> Days:
    """That weekday (0 = Monday) of ``today``'s calendar week."""
    monday = today - timedelta(days=today.weekday())
    return day(monday + timedelta(days=weekday))


def may_hold(language: Language, text: str) -> bool:
    """Whether ``text`` may hold one of ``language``'s expressions: it is written in the
    language's script and has one of its triggers."""
    return language.script.search(text) is not None and language.trigger.search(text) is not None


def any_of(*patterns: re.Pattern[str], flags: int = 0) -> re.Pattern[str]:
    """One pattern matching where any of ``patterns`` does (their group names dropped, so
    that one text is scanned once rather than once per pattern)."""
    return re.compile(
        "|".join(re.sub(r"\(\?P<\w+>", "(?:", pattern.pattern) for pattern in patterns), flags
    )
