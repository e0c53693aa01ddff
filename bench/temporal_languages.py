"""Time expressions in English, Chinese and Russian queries: the hand-written module
(``memmachine.retrieval.temporal``) against dateparser, on the same expressions.

For each query the list below gives the ranges a reader expects (half-open days, against a
fixed "now": Friday 2 June 2023, 15:30 UTC), or none for a query that names no time. Each
parser is scored on:

* exact: the ranges it returns are the expected ones;
* lenient (dateparser only gives points): every expected range holds a point it returns;
* false positives: queries that name no time for which it returns anything;
* µs per query (median and p95 of repeated runs on this machine).

dateparser is not a dependency of memmachine; run with it added for this run only::

    uv run --with dateparser==1.5.0 python bench/temporal_languages.py

Without dateparser installed only the hand-written module is measured.
"""

# Chinese and Russian text is this module's subject: its letters are meant, not confusables.
# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta

from memmachine.retrieval.temporal import asks_when, mentions_time, time_ranges

NOW = datetime(2023, 6, 2, 15, 30, tzinfo=UTC)  # a Friday

Span = tuple[str, str]

# (language, query, expected ranges)
CASES: list[tuple[str, str, list[Span]]] = [
    # English: what the module already reads
    ("en", "What did we do yesterday?", [("2023-06-01", "2023-06-02")]),
    ("en", "what did we discuss last week", [("2023-05-22", "2023-05-29")]),
    ("en", "Which book did I read last month?", [("2023-05-01", "2023-06-01")]),
    ("en", "Where did I go last May?", [("2023-05-01", "2023-06-01")]),
    ("en", "What did I buy 3 days ago?", [("2023-05-29", "2023-06-01")]),
    ("en", "two weeks ago", [("2023-05-16", "2023-05-23")]),
    ("en", "What did Maria donate in December 2022?", [("2022-12-01", "2023-01-01")]),
    ("en", "What painting did she show on October 13, 2022?", [("2022-10-13", "2022-10-14")]),
    ("en", "What did they do in 2022?", [("2022-01-01", "2023-01-01")]),
    ("en", "what happened last year", [("2022-01-01", "2023-01-01")]),
    ("en", "Where did I go in May last year?", [("2022-05-01", "2022-06-01")]),
    ("en", "What did I cook last Tuesday?", [("2023-05-30", "2023-05-31")]),
    # Chinese
    ("zh", "昨天", [("2023-06-01", "2023-06-02")]),
    ("zh", "前天", [("2023-05-31", "2023-06-01")]),
    ("zh", "上周", [("2023-05-22", "2023-05-29")]),
    ("zh", "上个月", [("2023-05-01", "2023-06-01")]),
    ("zh", "去年", [("2022-01-01", "2023-01-01")]),
    ("zh", "去年五月", [("2022-05-01", "2022-06-01")]),
    ("zh", "三天前", [("2023-05-29", "2023-06-01")]),
    ("zh", "2023年5月", [("2023-05-01", "2023-06-01")]),
    ("zh", "五月份", [("2023-05-01", "2023-06-01")]),
    ("zh", "上周三", [("2023-05-24", "2023-05-25")]),
    ("zh", "我去年五月去了哪里？", [("2022-05-01", "2022-06-01")]),
    ("zh", "我昨天吃了什么？", [("2023-06-01", "2023-06-02")]),
    ("zh", "上个月我读了哪本书？", [("2023-05-01", "2023-06-01")]),
    ("zh", "两周前我们讨论了什么？", [("2023-05-16", "2023-05-23")]),
    ("zh", "我们上周三在哪里吃饭？", [("2023-05-24", "2023-05-25")]),
    ("zh", "2022年10月13日我做了什么？", [("2022-10-13", "2022-10-14")]),
    ("zh", "去年十二月我买了什么？", [("2022-12-01", "2023-01-01")]),
    ("zh", "我十月去了北京吗？", [("2022-10-01", "2022-11-01")]),
    ("zh", "今年我学了什么？", [("2023-01-01", "2023-06-03")]),
    ("zh", "这周我见了谁？", [("2023-05-29", "2023-06-03")]),
    ("zh", "我2021年住在哪里？", [("2021-01-01", "2022-01-01")]),
    # Russian
    ("ru", "вчера", [("2023-06-01", "2023-06-02")]),
    ("ru", "позавчера", [("2023-05-31", "2023-06-01")]),
    ("ru", "на прошлой неделе", [("2023-05-22", "2023-05-29")]),
    ("ru", "в прошлом месяце", [("2023-05-01", "2023-06-01")]),
    ("ru", "в мае прошлого года", [("2022-05-01", "2022-06-01")]),
    ("ru", "три дня назад", [("2023-05-29", "2023-06-01")]),
    ("ru", "5 мая 2023", [("2023-05-05", "2023-05-06")]),
    ("ru", "в прошлый вторник", [("2023-05-30", "2023-05-31")]),
    ("ru", "Что я делал на прошлой неделе?", [("2023-05-22", "2023-05-29")]),
    ("ru", "Куда я ездил в мае прошлого года?", [("2022-05-01", "2022-06-01")]),
    ("ru", "Что я купил вчера?", [("2023-06-01", "2023-06-02")]),
    ("ru", "Какую книгу я читал в прошлом месяце?", [("2023-05-01", "2023-06-01")]),
    ("ru", "Что мы обсуждали две недели назад?", [("2023-05-16", "2023-05-23")]),
    ("ru", "Где я был в январе?", [("2023-01-01", "2023-02-01")]),
    ("ru", "Что случилось 13 октября 2022 года?", [("2022-10-13", "2022-10-14")]),
    ("ru", "Что я делал в марте 2022 года?", [("2022-03-01", "2022-04-01")]),
    ("ru", "Где я жил в 2021 году?", [("2021-01-01", "2022-01-01")]),
    ("ru", "Что изменилось в прошлом году?", [("2022-01-01", "2023-01-01")]),
    ("ru", "Кого я встретил на этой неделе?", [("2023-05-29", "2023-06-03")]),
    # No time named: numbers, names, words that look like months
    ("en", "What may Caroline do next?", []),
    ("en", "May said she likes tea", []),
    ("en", "Room 2023 booking", []),
    ("en", "I have 3 cats and 2 dogs", []),
    ("en", "What is my phone number?", []),
    ("zh", "我有三个孩子", []),
    ("zh", "他住在301房间", []),
    ("zh", "五月天是我最喜欢的乐队", []),
    ("zh", "我每天跑五公里", []),
    ("zh", "我的电话号码是多少？", []),
    ("ru", "Март — мой кот", []),
    ("ru", "Май любит рисовать", []),
    ("ru", "Какая майка лучше?", []),
    ("ru", "У меня три кошки и две собаки", []),
    ("ru", "Как зовут мою сестру?", []),
    ("ru", "Квартира 2023, дом 5", []),
]

# Messages as the 'when' stage reads them: it asks mentions_time of every candidate.
MESSAGES: dict[str, list[str]] = {
    "en": [
        "I adopted a cat yesterday after a long afternoon at the shelter with my sister",
        "The weather is lovely, we should go hiking together some time soon!",
    ],
    "zh": [
        "我昨天和妹妹在收容所待了一下午，最后领养了一只猫",
        "天气真好，我们找时间一起去爬山吧！",
    ],
    "ru": [
        "Вчера я весь день провёл с сестрой в приюте и взял оттуда кошку",
        "Погода чудесная, давай как-нибудь сходим в поход!",
    ],
}

Parser = Callable[[str], list[Span]]


def _day(value: datetime | date) -> str:
    return (value.date() if isinstance(value, datetime) else value).isoformat()


def hand_written(query: str) -> list[Span]:
    return [(_day(r.start), _day(r.end)) for r in time_ranges(query, NOW)]


def dateparser_parser(languages: list[str] | None) -> Parser:
    """dateparser's ``search_dates`` with a fixed base, each hit widened to the period
    dateparser reports for it (day, week, month or year)."""
    from dateparser.date import DateDataParser
    from dateparser.search import search_dates

    settings = {
        "RELATIVE_BASE": NOW.replace(tzinfo=None),
        "PREFER_DATES_FROM": "past",
        "RETURN_TIME_AS_PERIOD": True,
    }
    periods = DateDataParser(languages=languages, settings=settings)

    def parse(query: str) -> list[Span]:
        found = search_dates(query, languages=languages, settings=settings) or []
        spans: list[Span] = []
        for text, moment in found:
            data = periods.get_date_data(text)
            period = data.period or "day"
            day = moment.date()
            if period == "year":
                first, last = date(day.year, 1, 1), date(day.year + 1, 1, 1)
            elif period == "month":
                first = day.replace(day=1)
                last = (first + timedelta(days=32)).replace(day=1)
            elif period == "week":
                first = day - timedelta(days=day.weekday())
                last = first + timedelta(days=7)
            else:
                first, last = day, day + timedelta(days=1)
            spans.append((first.isoformat(), last.isoformat()))
        return spans

    return parse


def _lenient(got: Sequence[Span], expected: Sequence[Span]) -> bool:
    return all(any(e[0] <= g[0] < e[1] for g in got) for e in expected) and bool(got)


def measure(name: str, parse: Parser, repeats: int, show: bool) -> dict[str, object]:
    exact: dict[str, list[int]] = {}
    lenient: dict[str, list[int]] = {}
    false_positives: list[str] = []
    misses: list[str] = []
    for language, query, expected in CASES:
        got = parse(query)
        if not expected:
            if got:
                false_positives.append(f"{query!r} -> {got}")
            continue
        exact.setdefault(language, [0, 0])
        lenient.setdefault(language, [0, 0])
        exact[language][1] += 1
        lenient[language][1] += 1
        if got == expected:
            exact[language][0] += 1
        else:
            misses.append(f"{query!r}: got {got}, expected {expected}")
        if _lenient(got, expected):
            lenient[language][0] += 1
    times: list[float] = []
    for _ in range(repeats):
        for _, query, _ in CASES:
            started = time.perf_counter()
            parse(query)
            times.append((time.perf_counter() - started) * 1e6)
    times.sort()
    row = {
        "parser": name,
        "exact": {k: f"{v[0]}/{v[1]}" for k, v in exact.items()},
        "lenient": {k: f"{v[0]}/{v[1]}" for k, v in lenient.items()},
        "false_positives": f"{len(false_positives)}/{sum(1 for c in CASES if not c[2])}",
        "us_median": round(statistics.median(times), 1),
        "us_p95": round(times[int(len(times) * 0.95)], 1),
    }
    print(row)
    if show:
        for line in misses:
            print("  miss", line)
        for line in false_positives:
            print("  false positive", line)
    return row


def _percentiles(times: list[float]) -> tuple[float, float]:
    times.sort()
    return round(statistics.median(times), 1), round(times[int(len(times) * 0.95)], 1)


def hot_path(repeats: int) -> None:
    """What one search costs the two stages, per language: time_ranges and asks_when on the
    query, mentions_time on each of 100 candidates (a search for the top 33 at the default
    3 candidates per result; the default top 10 scores 30), and both on one long message
    of about 2,000 characters."""
    for language in ("en", "zh", "ru"):
        queries = [query for lang, query, _ in CASES if lang == language]
        per_query: list[float] = []
        for _ in range(repeats):
            for query in queries:
                started = time.perf_counter()
                time_ranges(query, NOW)
                asks_when(query)
                per_query.append((time.perf_counter() - started) * 1e6)
        candidates = (MESSAGES[language] * 50)[:100]
        per_search: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            for message in candidates:
                mentions_time(message)
            per_search.append((time.perf_counter() - started) * 1e6)
        long = " ".join(MESSAGES[language] * 40)[:2000]
        per_long: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            time_ranges(long, NOW)
            mentions_time(long)
            per_long.append((time.perf_counter() - started) * 1e6)
        print(
            {
                "language": language,
                "us_query_median_p95": _percentiles(per_query),
                "us_100_candidates_median_p95": _percentiles(per_search),
                "us_2000_chars_median_p95": _percentiles(per_long),
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="timing passes over the list")
    parser.add_argument("--show", action="store_true", help="print each miss and false positive")
    args = parser.parse_args()
    measure("hand-written", hand_written, args.repeats, args.show)
    hot_path(args.repeats)
    try:
        import dateparser  # noqa: F401
    except ImportError:
        print("dateparser not installed: see the docstring for the command that adds it")
        return
    # dateparser is slow: fewer timing passes
    slow = max(1, args.repeats // 10)
    measure("dateparser en+zh+ru", dateparser_parser(["en", "zh", "ru"]), slow, args.show)
    measure("dateparser detected", dateparser_parser(None), slow, args.show)


if __name__ == "__main__":
    main()
