"""Russian time expressions resolve to the same ranges as their English equivalents."""

# Russian text is this module's subject: its letters are meant, not confusables.
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
        ("вчера", "yesterday", ("2023-06-01", "2023-06-02")),
        ("Что я делал на прошлой неделе?", "last week", ("2023-05-22", "2023-05-29")),
        ("в прошлом месяце", "last month", ("2023-05-01", "2023-06-01")),
        ("Что изменилось в прошлом году?", "last year", ("2022-01-01", "2023-01-01")),
        ("три дня назад", "three days ago", ("2023-05-29", "2023-06-01")),
        ("Что мы обсуждали две недели назад?", "two weeks ago", ("2023-05-16", "2023-05-23")),
        ("5 мая 2023", "5 May 2023", ("2023-05-05", "2023-05-06")),
        ("Что я делал в марте 2022 года?", "March 2022", ("2022-03-01", "2022-04-01")),
        ("Где я был в январе?", "in January", ("2023-01-01", "2023-02-01")),
        ("Где я жил в 2021 году?", "in 2021", ("2021-01-01", "2022-01-01")),
        ("сегодня", "today", ("2023-06-02", "2023-06-03")),
        ("Кого я встретил на этой неделе?", "this week", ("2023-05-29", "2023-06-03")),
        ("на прошлых выходных", "last weekend", ("2023-05-27", "2023-05-29")),
        ("в мае прошлого года", "in May last year", ("2022-05-01", "2022-06-01")),
        # the latest Tuesday before now
        ("в прошлый вторник", "last Tuesday", ("2023-05-30", "2023-05-31")),
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
        ("позавчера", ("2023-05-31", "2023-06-01")),
        ("Куда я ездил в мае прошлого года?", ("2022-05-01", "2022-06-01")),
        ("в позапрошлом году", ("2021-01-01", "2022-01-01")),
        ("13 октября прошлого года", ("2022-10-13", "2022-10-14")),
        ("Что случилось 13 октября 2022 года?", ("2022-10-13", "2022-10-14")),
        ("Что было 05.05.2023?", ("2023-05-05", "2023-05-06")),
        ("в прошлую среду", ("2023-05-31", "2023-06-01")),
        ("в прошлое воскресенье", ("2023-05-28", "2023-05-29")),
        ("в это воскресенье", ("2023-06-04", "2023-06-05")),
        ("неделю назад", ("2023-05-23", "2023-05-30")),
        ("пару дней назад", ("2023-05-30", "2023-06-02")),
        ("пять лет назад", ("2017-12-03", "2018-12-03")),
        ("месяц тому назад", ("2023-04-18", "2023-05-19")),
        ("вчерашний разговор", ("2023-06-01", "2023-06-02")),
        ("в 2021.", ("2021-01-01", "2022-01-01")),
    ],
)
def test_russian_dates_and_number_words(query: str, expected: tuple[str, str]) -> None:
    assert spans(query) == [expected]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # every case of a month's name: nominative, genitive, dative, instrumental, prepositional
        ("май 2022", ("2022-05-01", "2022-06-01")),
        ("1 мая 2022", ("2022-05-01", "2022-05-02")),
        ("к маю", ("2023-05-01", "2023-06-01")),
        ("за маем 2022 года", ("2022-05-01", "2022-06-01")),
        ("в мае", ("2023-05-01", "2023-06-01")),
        ("январь 2023", ("2023-01-01", "2023-02-01")),
        ("до января", ("2023-01-01", "2023-02-01")),
        ("в январе", ("2023-01-01", "2023-02-01")),
        ("с 5-го февраля 2023", ("2023-02-05", "2023-02-06")),
        ("в сентябре прошлого года", ("2022-09-01", "2022-10-01")),
        ("в начале августа", ("2022-08-01", "2022-09-01")),
        ("с декабря", ("2022-12-01", "2023-01-01")),
    ],
)
def test_russian_month_names_in_every_case(query: str, expected: tuple[str, str]) -> None:
    assert spans(query) == [expected]


@pytest.mark.parametrize(
    "query",
    [
        "Март — мой кот",
        "Май любит рисовать",
        "Мая придёт завтра",
        "Какая майка лучше?",
        "Мартышка в зоопарке",
        "У меня три кошки и две собаки",
        "Как зовут мою сестру?",
        "Квартира 2023, дом 5",
        "в 2021 квартире",
        "Это вторник или среда?",
    ],
)
def test_russian_without_a_time_names_none(query: str) -> None:
    assert spans(query) == []


@pytest.mark.parametrize(
    "query",
    ["Когда я был в Париже?", "В каком году я переехал?", "Какого числа день рождения?"],
)
def test_russian_questions_asking_when(query: str) -> None:
    assert asks_when(query)


@pytest.mark.parametrize("query", ["Что было, когда шёл дождь?", "Куда я ездил?"])
def test_russian_questions_not_asking_when(query: str) -> None:
    assert not asks_when(query)


@pytest.mark.parametrize(
    ("text", "says_when"),
    [
        ("Я вчера был в зоопарке", True),
        ("Я взял кошку из приюта три дня назад", True),
        ("Я родился 12 января 1990 года", True),
        ("В следующем месяце мы едем в отпуск", True),
        ("Я недавно начал рисовать", True),
        ("Кошка очень милая", False),
        ("Март — мой кот", False),
    ],
)
def test_russian_messages_that_say_when(text: str, says_when: bool) -> None:
    assert mentions_time(text) is says_when
