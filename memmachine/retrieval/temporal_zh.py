"""Chinese time expressions: the words and grammar; the days they denote come from
:mod:`memmachine.retrieval.temporal_spans`.

Numbers are written in digits (5, ５) or Chinese numerals (五, 十二, 两, 二〇二三).

* a day: ``2023年5月5日``, ``5月5号``, ``去年十月三日`` (without a year, the latest such day
  not after the anchor);
* a month: ``2023年5月``, ``去年五月``, ``今年三月``, and ``五月``/``五月份`` without a year
  (the latest such month not after the anchor, as "in May" in English);
* a year: ``2021年``, ``今年``, ``去年``, ``前年``;
* relative: ``今天``, ``昨天``, ``前天``, ``大前天``, ``这周``/``本周``, ``上周``/``上星期``/
  ``上个礼拜``, ``上周末``, a weekday of last or this week (``上周三``, ``这周一``),
  ``这个月``/``本月``, ``上个月``, and ``N天前``, ``N周前``, ``N个星期前``, ``N个月前``,
  ``N年前`` (also with 以前 or 之前), as "N days ago" in English.
"""

# Chinese text is this module's subject: its characters are meant, not confusables.
# ruff: noqa: RUF001, RUF002

from __future__ import annotations

import re
from datetime import date, timedelta

from memmachine.retrieval import temporal_spans as spans
from memmachine.retrieval.temporal_spans import Days, Language, Spans

__all__ = ["CHINESE"]

_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "兩": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_NUMERALS = "零〇一二两兩三四五六七八九十"
#: A small number: a month, a day, a count.
_NUM = rf"(?:[0-9０-９]{{1,3}}|[{_NUMERALS}]{{1,3}})"
#: A year, in digits or digit by digit (二〇二三).
_YEAR4 = r"(?:[0-9０-９]{4}|[零〇一二三四五六七八九]{4})"
#: Years named relative to this one, by how many years back.
_YEARS_BACK = {"今年": 0, "去年": 1, "前年": 2, "大前年": 3}
# 以前年轻 is "young before", not 前年.
_REL_YEAR = r"(?:大前年|(?<![之以提])前年|去年|今年)"
_NOT_AFTER_NUMBER = rf"(?<![0-9０-９{_NUMERALS}个個几幾第])"
_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "七": 6}

_DATE = re.compile(
    rf"{_NOT_AFTER_NUMBER}(?:(?P<year>{_YEAR4})年|(?P<rel>{_REL_YEAR}))?"
    rf"(?P<month>{_NUM})月(?P<day>{_NUM})[日号號]"
)
# 五月天 is a band and 月饼 a cake, not a month.
_MONTH = re.compile(
    rf"{_NOT_AFTER_NUMBER}(?:(?P<year>{_YEAR4})年|(?P<rel>{_REL_YEAR}))?"
    rf"(?P<month>{_NUM})月份?(?![天饼餅0-9０-９{_NUMERALS}])"
)
# 1990年代 is a decade.
_YEAR = re.compile(rf"(?<![0-9０-９])(?P<year>{_YEAR4})年(?!代)|(?P<rel>{_REL_YEAR})")
_DAY_WORD = re.compile(r"今天|今日|今晚|昨天|昨日|昨晚|大前天|(?<![之以提])前天")
# 马上周末 is "the weekend soon", not 上周末.
# 马上周末 is "the weekend soon", 日本周边 "around Japan", 这周围 "around here".
_WEEK = re.compile(
    r"(?P<which>(?<![马馬])上个?|(?<![马馬])上個|这个?|這個?|(?<!日)本)"
    r"(?:周|週|星期|礼拜|禮拜)(?P<day>[一二三四五六日天七末])?(?![围圍边邊期到年])"
)
# 这个月亮 is "this moon", 上月球 "go up to the moon".
_MONTH_WORD = re.compile(r"(?P<which>上个?|上個|这个?|這個?|本)月(?![份饼餅球亮光])")
_AGO = re.compile(
    r"(?<![0-9０-９])(?P<count>" + _NUM + r"|几|幾|数|數)"
    r"(?P<unit>天|日|[个個]?星期|[个個]?礼拜|[个個]?禮拜|周|週|[个個]月|年)(?:以前|之前|前)"
)
_UNITS = {
    "天": "day",
    "日": "day",
    "星": "week",
    "礼": "week",
    "禮": "week",
    "周": "week",
    "週": "week",
    "月": "month",
    "年": "year",
}

_ASKS_WHEN = re.compile(
    r"什么时候|什麼時候|何时|何時|几时|幾時|哪天|哪一天|哪年|哪一年|哪个月|哪個月|哪一个月"
    r"|几月|幾月|几号|幾號|哪个星期|哪個星期|多久以前|多久前|多长时间以前|什么日子"
)
# Besides every expression that names a time: the future, "recently", a weekday.
_MENTIONS_TIME = re.compile(
    r"明天|后天|後天|明年|最近|近来|近來|下[个個]?(?:周|週|星期|礼拜|禮拜|月)"
    r"|星期[一二三四五六日天]|(?<![每])周[一二三四五六日末]"
)
#: Every expression, and the words above: what mentions_time looks for.
_MENTIONS_ANY = spans.any_of(
    _MENTIONS_TIME, _DAY_WORD, _WEEK, _MONTH_WORD, _AGO, _YEAR, _DATE, _MONTH
)
_SCRIPT = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
#: What every expression above has; 天 alone is in too many words (天气, 每天, 聊天).
_TRIGGER = re.compile(r"[年月日号號晚周週礼禮近]|[今昨前后後明]天|天[以之]?前|星期")


def _find(query: str, today: date, found: Spans) -> None:
    for match in _DATE.finditer(query):
        if found.free(match):
            month, day = _number(match["month"]), _number(match["day"])
            year = _year(match, today)
            if year is None:
                found.add(match, spans.latest_day(month, day, today))
            else:
                found.add(match, spans.dated(year, month, day))
    for match in _MONTH.finditer(query):
        if found.free(match):
            month = _number(match["month"])
            year = _year(match, today)
            if year is None:
                found.add(match, spans.latest_month(month, today))
            else:
                found.add(match, spans.month(year, month))
    for match in _YEAR.finditer(query):
        if found.free(match):
            if match["rel"] == "今年":
                found.add(match, spans.relative("year", True, today))
            else:
                year = _year(match, today)
                found.add(match, None if year is None else spans.year(year))
    for match in _DAY_WORD.finditer(query):
        if found.free(match):
            back = {"今": 0, "昨": 1, "前": 2, "大": 3}[match.group(0)[0]]
            found.add(match, spans.day(today - timedelta(days=back)))
    for match in _WEEK.finditer(query):
        if found.free(match):
            found.add(match, _week(match["which"].startswith("上"), match["day"], today))
    for match in _MONTH_WORD.finditer(query):
        if found.free(match):
            found.add(match, spans.relative("month", not match["which"].startswith("上"), today))
    for match in _AGO.finditer(query):
        if found.free(match):
            count = _number(match["count"])
            unit = _UNITS[match["unit"].lstrip("个個")[0]]
            found.add(match, spans.ago(count, unit, today))


def _week(last: bool, day: str | None, today: date) -> Days:
    if day is None:
        return spans.relative("week", not last, today)
    if day == "末":
        monday = today - timedelta(days=today.weekday() + (7 if last else 0))
        saturday = monday + timedelta(days=5)
        return saturday, saturday + timedelta(days=2)
    weekday = _WEEKDAYS[day]
    if last:
        return spans.weekday_of_last_week(weekday, today)
    return spans.weekday_of_this_week(weekday, today)


def _year(match: re.Match[str], today: date) -> int | None:
    if match["year"]:
        return _number(match["year"])
    if match["rel"]:
        return today.year - _YEARS_BACK[match["rel"]]
    return None


def _number(text: str) -> int:
    """``5``, ``５``, ``五``, ``十二``, ``二十``, ``两``, ``二〇二三``; ``几`` (a few) is 3 and
    anything unreadable 0, which no month or day has."""
    if text.isdigit():
        return int(text)
    if text in ("几", "幾", "数", "數"):
        return 3
    if "十" in text:
        tens, _, units = text.partition("十")
        if len(tens) > 1 or len(units) > 1 or "十" in units:
            return 0
        return _DIGITS.get(tens, 1 if not tens else 0) * 10 + _DIGITS.get(units, 0)
    value = 0
    for character in text:
        value = value * 10 + _DIGITS.get(character, 0)
    return value


CHINESE = Language(
    name="zh",
    script=_SCRIPT,
    trigger=_TRIGGER,
    find=_find,
    asks_when=lambda text: _ASKS_WHEN.search(text) is not None,
    mentions_time=lambda text: _MENTIONS_ANY.search(text) is not None,
)
