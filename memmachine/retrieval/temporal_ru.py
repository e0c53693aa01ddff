"""Russian time expressions: the words and grammar; the days they denote come from
:mod:`memmachine.retrieval.temporal_spans`.

Month names are read in every case (май, мая, маю, маем, мае; январь ... январе), numbers in
digits or words (три, пять, две, пару, несколько).

* a day: ``5 мая 2023``, ``5 мая 2023 года``, ``05.05.2023``, ``13 октября прошлого года``,
  and ``5 мая`` without a year (the latest such day not after the anchor);
* a month: ``март 2022``, ``в марте 2022 года``, ``в мае прошлого года``, and after a
  preposition without a year (``в мае``, ``с января``, ``в начале июня``: the latest such
  month not after the anchor, as "in May" in English); a month name alone («Март — мой
  кот») is not read as a month;
* a year: ``в 2021 году``, ``2021 г.``, ``в 2021``, ``в этом/прошлом/позапрошлом году``;
* relative: ``сегодня``, ``вчера``, ``позавчера``, ``на этой/прошлой неделе``, ``на прошлых
  выходных``, ``в этом/прошлом месяце``, ``в прошлый вторник`` (the latest Tuesday before
  the anchor, as "last Tuesday"), ``в этот вторник``, and ``N дней/недель/месяцев/лет
  (тому) назад``, ``неделю назад``, as "N days ago" in English.
"""

# Russian text is this module's subject: its letters are meant, not confusables.
# ruff: noqa: RUF001, RUF002

from __future__ import annotations

import re
from datetime import date, timedelta

from memmachine.retrieval import temporal_spans as spans
from memmachine.retrieval.temporal_spans import Days, Language, Spans

__all__ = ["RUSSIAN"]

_MONTH = (
    r"(?P<month>(?:январ|феврал|апрел|июн|июл|сентябр|октябр|ноябр|декабр)(?:ь|я|ю|е|ём|ем)"
    r"|(?:март|август)(?:а|у|е|ом)?|ма(?:й|я|ю|е|ем))(?![а-яё])"
)
_MONTH_NUMBERS = {
    "янв": 1,
    "фев": 2,
    "мар": 3,
    "апр": 4,
    "июн": 6,
    "июл": 7,
    "авг": 8,
    "сен": 9,
    "окт": 10,
    "ноя": 11,
    "дек": 12,
}
_NUMBERS = {
    "один": 1,
    "одна": 1,
    "одну": 1,
    "одного": 1,
    "одной": 1,
    "два": 2,
    "две": 2,
    "двух": 2,
    "пару": 2,
    "пара": 2,
    "три": 3,
    "трёх": 3,
    "трех": 3,
    "несколько": 3,
    "нескольких": 3,
    "четыре": 4,
    "четырёх": 4,
    "четырех": 4,
    "пять": 5,
    "шесть": 6,
    "семь": 7,
    "восемь": 8,
    "девять": 9,
    "десять": 10,
}
_COUNT = r"\d+|" + "|".join(sorted(_NUMBERS, key=len, reverse=True))
_YEAR4 = r"(?:19|20)\d\d"
_YEAR_WORD = r"(?:году|года|год|г)(?![а-яё])\.?"
#: Which year, week or month a phrase names, relative to the current one: 0 this, 1 the last.
_WHICH = r"(?P<which>позапрошл\w*|прошл\w*|предыдущ\w*|эт(?:от|ой|ом|у|ого|и|а)|текущ\w*)"
_REL_YEAR = rf"{_WHICH}\s+года"

_DAY = re.compile(
    rf"\b(?P<day>[0-3]?\d)(?:-?(?:го|е|ое))?\s+{_MONTH}"
    rf"(?:\s+(?:(?P<year>{_YEAR4})\b(?:\s*{_YEAR_WORD})?|{_REL_YEAR}))?",
    re.IGNORECASE,
)
_NUMERIC_DAY = re.compile(
    rf"\b(?P<day>[0-3]?\d)\.(?P<month>[01]?\d)\.(?P<year>{_YEAR4})\b", re.IGNORECASE
)
_MONTH_YEAR = re.compile(
    rf"(?<![а-яё]){_MONTH}\s+(?:(?P<year>{_YEAR4})\b(?:\s*{_YEAR_WORD})?|{_REL_YEAR})",
    re.IGNORECASE,
)
# A month without a year or day must follow a preposition: «Март — мой кот» names a cat.
_BARE_MONTH = re.compile(
    rf"\b(?:в|во|с|со|до|к|ко|по|после|за|начале|конце|середине|течение)\s+{_MONTH}",
    re.IGNORECASE,
)
_YEAR = re.compile(
    rf"\b(?P<year>{_YEAR4})\s*{_YEAR_WORD}|\bв\s+(?P<bare>{_YEAR4})(?=\s*(?:[,.!?;:)]|$))",
    re.IGNORECASE,
)
_DAY_WORD = re.compile(r"\b(?P<word>сегодня|вчера|позавчера)\w*", re.IGNORECASE)
_WEEKDAYS = {"пон": 0, "вто": 1, "сре": 2, "чет": 3, "пят": 4, "суб": 5, "вос": 6}
# After a preposition: «Это вторник» is "it is Tuesday", «в это воскресенье» "this Sunday".
_WEEKDAY = re.compile(
    r"\b(?:в|во)\s+(?P<which>позапрошл\w*|прошл\w*|предыдущ\w*|эт(?:от|у|о)|текущ\w*)\s+"
    r"(?P<day>понедельник|вторник|сред[ауы]|четверг|пятниц[ауы]|суббот[ауы]|воскресень[ея])"
    r"(?![а-яё])",
    re.IGNORECASE,
)
_PERIOD = re.compile(
    rf"\b{_WHICH}\s+(?P<unit>недел|месяц|год|выходн)\w*",
    re.IGNORECASE,
)
_AGO = re.compile(
    rf"\b(?:(?P<count>{_COUNT})\s+)?(?P<unit>дн(?:я|ей)|день|сутки|суток|недел[юиь]"
    r"|месяц(?:а|ев)?|год(?:а)?|лет)\s+(?:тому\s+)?назад\b",
    re.IGNORECASE,
)
_UNITS = {"д": "day", "с": "day", "н": "week", "м": "month", "г": "year", "л": "year"}
_PERIODS = {"недел": "week", "месяц": "month", "год": "year", "выходн": "weekend"}

_ASKS_WHEN = re.compile(
    r"^\W*(?:а\s+|и\s+)?когда\b|\bв\s+как(?:ом|ой|ую)\s+(?:году|месяце|день|числе|дату)\b"
    r"|\bкакого\s+(?:числа|года|месяца)\b|\bкак\s+давно\b|\bсколько\s+\w+\s+назад\b"
    r"|\bс\s+каких\s+пор\b",
    re.IGNORECASE,
)
# Besides every expression that names a time: the future, "recently", a weekday, a season.
_MENTIONS_TIME = re.compile(
    r"\b(?:завтра|послезавтра|недавно|назад|(?:следующ|прошл|эт)\w*\s+(?:лет|зим|весн|осен)\w*"
    r"|следующ\w*\s+(?:недел|месяц|год|выходн|понедельник|вторник|сред|четверг|пятниц"
    r"|суббот|воскресень)\w*"
    r"|(?:в|во)\s+(?:понедельник|вторник|среду|четверг|пятницу|субботу|воскресенье))\b",
    re.IGNORECASE,
)
#: Every expression, and the words above: what mentions_time looks for. (Every "N ...
#: назад" holds «назад», which the words match.)
_MENTIONS_ANY = spans.any_of(
    _MENTIONS_TIME,
    _DAY_WORD,
    _PERIOD,
    _WEEKDAY,
    _YEAR,
    _DAY,
    _NUMERIC_DAY,
    _MONTH_YEAR,
    _BARE_MONTH,
    flags=re.IGNORECASE,
)
_SCRIPT = re.compile(r"[А-Яа-яЁё]")
#: A digit, or a word start every expression above without one has (not «погода»,
#: «думаю», which hold «год», «маю»).
_TRIGGER = re.compile(
    r"\d|\b(?:вчера|позавчера|сегодн|завтра|послезавтра|недавн|назад|недел|месяц|год|лет"
    r"|выходн|понедельн|вторн|сред|четверг|пятниц|суббот|воскрес|январ|феврал|ма(?:рт|[йяюе])"
    r"|апрел|ию[нл]|август|сентябр|октябр|ноябр|декабр|зим|весн|осен)",
    re.IGNORECASE,
)


def _find(query: str, today: date, found: Spans) -> None:
    for match in _DAY.finditer(query):
        if found.free(match):
            month, day = _month(match["month"]), int(match["day"])
            year = _year(match, today)
            if year is None:
                found.add(match, spans.latest_day(month, day, today))
            else:
                found.add(match, spans.dated(year, month, day))
    for match in _NUMERIC_DAY.finditer(query):
        if found.free(match):
            found.add(
                match, spans.dated(int(match["year"]), int(match["month"]), int(match["day"]))
            )
    for match in _MONTH_YEAR.finditer(query):
        if found.free(match):
            year = _year(match, today)
            found.add(match, None if year is None else spans.month(year, _month(match["month"])))
    for match in _BARE_MONTH.finditer(query):
        if found.free(match):
            found.add(match, spans.latest_month(_month(match["month"]), today))
    for match in _YEAR.finditer(query):
        if found.free(match):
            found.add(match, spans.year(int(match["year"] or match["bare"])))
    for match in _DAY_WORD.finditer(query):
        if found.free(match):
            back = {"сег": 0, "вче": 1, "поз": 2}[match["word"][:3].casefold()]
            found.add(match, spans.day(today - timedelta(days=back)))
    for match in _WEEKDAY.finditer(query):
        if found.free(match):
            weekday = _WEEKDAYS[match["day"][:3].casefold()]
            back = _back(match["which"])
            if back == 0:
                found.add(match, spans.weekday_of_this_week(weekday, today))
            else:
                before = spans.weekday_before(weekday, today)[0]
                found.add(match, spans.day(before - timedelta(days=7 * (back - 1))))
    for match in _PERIOD.finditer(query):
        if found.free(match):
            unit = next(v for k, v in _PERIODS.items() if match["unit"].casefold().startswith(k))
            found.add(match, _period(unit, _back(match["which"]), today))
    for match in _AGO.finditer(query) if "назад" in query.casefold() else ():
        if found.free(match):
            count = _count(match["count"])
            unit = _UNITS[match["unit"][0].casefold()]
            found.add(match, spans.ago(count, unit, today))


def _period(unit: str, back: int, today: date) -> Days:
    """This (``back`` 0), the last (1) or the one before the last (2) week, weekend, month
    or year."""
    if back == 0:
        return spans.relative(unit, True, today)
    if unit in ("week", "weekend"):
        first, last = spans.relative(unit, False, today)
        shift = timedelta(days=7 * (back - 1))
        return first - shift, last - shift
    if unit == "month":
        for _ in range(back - 1):
            today = today.replace(day=1) - timedelta(days=1)
        return spans.relative("month", False, today)
    first, last = spans.relative("year", False, today)
    return first.replace(year=first.year - back + 1), last.replace(year=last.year - back + 1)


def _back(which: str) -> int:
    which = which.casefold()
    if which.startswith("позапрошл"):
        return 2
    if which.startswith(("прошл", "предыдущ")):
        return 1
    return 0


def _year(match: re.Match[str], today: date) -> int | None:
    if match["year"]:
        return int(match["year"])
    if match["which"]:
        return today.year - _back(match["which"])
    return None


def _month(text: str) -> int:
    return _MONTH_NUMBERS.get(text[:3].casefold(), 5)


def _count(text: str | None) -> int:
    if text is None:
        return 1
    text = text.casefold()
    return int(text) if text.isdigit() else _NUMBERS.get(text, 1)


RUSSIAN = Language(
    name="ru",
    script=_SCRIPT,
    trigger=_TRIGGER,
    find=_find,
    asks_when=lambda text: _ASKS_WHEN.search(text) is not None,
    mentions_time=lambda text: _MENTIONS_ANY.search(text) is not None,
)
