"""Chinese time expressions resolve to the same ranges as their English equivalents."""

# Chinese text is this module's subject: its punctuation is meant, not a confusable.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memmachine.retrieval.temporal import asks_when, mentions_time, time_ranges

#: A Friday.
NOW = datetime(2023, 6, 2, 15, 30, tzinfo=UTC)


def spans(query: str) -> list[tuple[str, str]]:
    return [(r.start.date().isoformat(), r.end.date().isoformat()) for r in time_ranges(query, NOW)]


@pytest.mark.parametrize(
    ("query", "english", "expected"),
    [
        ("昨天", "yesterday", ("2023-06-01", "2023-06-02")),
        ("上周", "last week", ("2023-05-22", "2023-05-29")),
        ("上个月", "last month", ("2023-05-01", "2023-06-01")),
        ("去年", "last year", ("2022-01-01", "2023-01-01")),
        ("三天前", "three days ago", ("2023-05-29", "2023-06-01")),
        ("两周前我们讨论了什么？", "two weeks ago", ("2023-05-16", "2023-05-23")),
        ("2023年5月", "May 2023", ("2023-05-01", "2023-06-01")),
        ("五月份", "in May", ("2023-05-01", "2023-06-01")),
        ("2022年10月13日我做了什么？", "on 13 October 2022", ("2022-10-13", "2022-10-14")),
        ("今天", "today", ("2023-06-02", "2023-06-03")),
        ("这周我见了谁？", "this week", ("2023-05-29", "2023-06-03")),
        ("今年我学了什么？", "this year", ("2023-01-01", "2023-06-03")),
        ("上周末", "last weekend", ("2023-05-27", "2023-05-29")),
        ("去年五月", "May last year", ("2022-05-01", "2022-06-01")),
    ],
)
def test_an_expression_names_the_days_its_english_equivalent_does(
    query: str, english: str, expected: tuple[str, str]
) -> None:
    assert spans(query) == [expected]
    assert spans(english) == [expected]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("前天", ("2023-05-31", "2023-06-01")),
        ("大前天", ("2023-05-30", "2023-05-31")),
        ("我去年五月去了哪里？", ("2022-05-01", "2022-06-01")),
        ("去年十二月我买了什么？", ("2022-12-01", "2023-01-01")),
        ("前年", ("2021-01-01", "2022-01-01")),
        ("我2021年住在哪里？", ("2021-01-01", "2022-01-01")),
        ("二〇二一年十月", ("2021-10-01", "2021-11-01")),
        # a month without a year: the latest not after now, as "in October"
        ("我十月去了北京吗？", ("2022-10-01", "2022-11-01")),
        ("十二月份", ("2022-12-01", "2023-01-01")),
        ("去年5月3号", ("2022-05-03", "2022-05-04")),
        ("5月3日", ("2023-05-03", "2023-05-04")),
        # a weekday of last week (Wednesday 24 May), of this week
        ("上周三", ("2023-05-24", "2023-05-25")),
        ("我们上周三在哪里吃饭？", ("2023-05-24", "2023-05-25")),
        ("上个星期天", ("2023-05-28", "2023-05-29")),
        ("这周一", ("2023-05-29", "2023-05-30")),
        ("我三个月前开始学钢琴", ("2023-02-17", "2023-03-20")),
        ("两年前", ("2020-12-02", "2021-12-02")),
        ("一个星期以前", ("2023-05-23", "2023-05-30")),
        ("几天前", ("2023-05-29", "2023-06-01")),
    ],
)
def test_chinese_dates_and_numerals(query: str, expected: tuple[str, str]) -> None:
    assert spans(query) == [expected]


@pytest.mark.parametrize(
    "query",
    [
        "我有三个孩子",
        "他住在301房间",
        "五月天是我最喜欢的乐队",  # a band
        "我每天跑五公里",
        "我的电话号码是多少？",
        "这个月亮真圆",  # "this moon"
        "日本周边的岛屿",  # "around Japan"
        "以前年轻的时候",  # "when young, before"
        "之前天气很好",  # "the weather was good before"
        "马上周末了",  # "the weekend is soon"
        "1990年代的音乐",  # a decade
        "十三月",
    ],
)
def test_chinese_without_a_time_names_none(query: str) -> None:
    assert spans(query) == []


def test_english_and_chinese_in_one_query_both_count() -> None:
    assert spans("May 2023 和 去年五月") == [
        ("2023-05-01", "2023-06-01"),
        ("2022-05-01", "2022-06-01"),
    ]


@pytest.mark.parametrize(
    "query", ["你什么时候去的北京？", "我是哪一年搬家的？", "生日是几月几号？"]
)
def test_chinese_questions_asking_when(query: str) -> None:
    assert asks_when(query)


@pytest.mark.parametrize("query", ["我去北京做什么？", "你喜欢哪本书？"])
def test_chinese_questions_not_asking_when(query: str) -> None:
    assert not asks_when(query)


@pytest.mark.parametrize(
    ("text", "says_when"),
    [
        ("我昨天去了动物园", True),
        ("三天前我收养了一只猫", True),
        ("下个月我们去旅行", True),
        ("我最近在学画画", True),
        ("这只猫很可爱", False),
        ("这个月亮真圆", False),
    ],
)
def test_chinese_messages_that_say_when(text: str, says_when: bool) -> None:
    assert mentions_time(text) is says_when
