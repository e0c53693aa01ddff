"""Query and message analysis behind search: time expressions, sentences, named speakers,
and the texts an episode is indexed under."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memmachine.retrieval.derivatives import MAX_DERIVATIVES, sentence_spans, split_sentences
from memmachine.retrieval.speakers import named_speakers
from memmachine.retrieval.temporal import asks_when, mentions_time, time_ranges
from memmachine.retrieval.text import (
    episode_search_text,
    indexed_text,
    window_layout,
    window_text,
)

#: A Friday.
ANCHOR = datetime(2023, 6, 2, 15, 30, tzinfo=UTC)


def spans(query: str, anchor: datetime = ANCHOR, **kwargs: timedelta) -> list[tuple[str, str]]:
    return [
        (r.start.date().isoformat(), r.end.date().isoformat())
        for r in time_ranges(query, anchor, **kwargs)
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What painting did she show on October 13, 2023?", [("2023-10-13", "2023-10-14")]),
        ("What did Gina find on 1 February, 2023?", [("2023-02-01", "2023-02-02")]),
        ("notes from 2023-02-28", [("2023-02-28", "2023-03-01")]),
        ("What did Maria donate in December 2023?", [("2023-12-01", "2024-01-01")]),
        ("What did they do in 2022?", [("2022-01-01", "2023-01-01")]),
        # a month without a year: its latest occurrence not after the anchor
        ("When did Melanie go camping in June?", [("2023-06-01", "2023-07-01")]),
        ("What happened last May?", [("2023-05-01", "2023-06-01")]),
        ("plans made in July", [("2022-07-01", "2022-08-01")]),
        ("yesterday's call", [("2023-06-01", "2023-06-02")]),
        ("what did we discuss last week", [("2023-05-22", "2023-05-29")]),
        ("last weekend", [("2023-05-27", "2023-05-29")]),
        ("last month", [("2023-05-01", "2023-06-01")]),
        ("two weeks ago", [("2023-05-16", "2023-05-23")]),
        ("3 days ago", [("2023-05-29", "2023-06-01")]),
        # the latest such weekday before the anchor, a Friday
        ("What did I cook last Tuesday?", [("2023-05-30", "2023-05-31")]),
        ("last Friday", [("2023-05-26", "2023-05-27")]),
        ("Where did I go in May last year?", [("2022-05-01", "2022-06-01")]),
        ("March of this year", [("2023-03-01", "2023-04-01")]),
        # an impossible day still names its month
        ("on 31 February 2023", [("2023-02-01", "2023-03-01")]),
    ],
)
def test_time_expressions_resolve_against_the_anchor(
    query: str, expected: list[tuple[str, str]]
) -> None:
    assert spans(query) == expected


def test_a_named_day_after_before_anchors_relative_expressions() -> None:
    # 10 April 2023 was a Monday: "the weekend before" is 8-9 April
    assert spans("What did Maria do last weekend before April 10, 2023?") == [
        ("2023-04-08", "2023-04-10"),
        ("2023-04-10", "2023-04-11"),
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # from the time pointed at to the named day: the event, and the day it was told
        ("the puppy she got two weeks before August 11, 2023", [("2023-07-25", "2023-08-12")]),
        ("What did John do the week before August 3, 2023?", [("2023-07-27", "2023-08-04")]),
        ("the day before 2023-03-01", [("2023-02-28", "2023-03-02")]),
        # 25 October 2022 was a Tuesday; 28 October 2023 a Saturday; 4 October 2023 a Wednesday
        ("on the Sunday before October 25, 2022", [("2022-10-23", "2022-10-26")]),
        ("on the Saturday after October 28, 2023", [("2023-10-28", "2023-11-05")]),
        ("over the weekend before 4th October, 2023", [("2023-09-30", "2023-10-05")]),
        ("three days after June 1, 2023", [("2023-06-01", "2023-06-06")]),
    ],
)
def test_an_offset_from_a_named_day_spans_to_that_day(
    query: str, expected: list[tuple[str, str]]
) -> None:
    assert spans(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "What may Caroline do next?",  # the verb, not the month
        "Why do they march every spring?",
        "What did Caroline research?",
        "Room 2023 booking",
    ],
)
def test_queries_without_a_time_name_none(query: str) -> None:
    assert time_ranges(query, ANCHOR) == []


def test_ranges_widen_by_the_slack_and_contain_their_moments() -> None:
    (day,) = time_ranges("on 13 October 2023", ANCHOR, slack=timedelta(days=2))
    assert (day.start.date().isoformat(), day.end.date().isoformat()) == (
        "2023-10-11",
        "2023-10-16",
    )
    assert datetime(2023, 10, 15, 23, 0, tzinfo=UTC) in day
    assert datetime(2023, 10, 15, 23, 0) in day  # naive = UTC
    assert datetime(2023, 10, 16, tzinfo=UTC) not in day


def test_a_naive_anchor_is_utc() -> None:
    assert spans("yesterday", ANCHOR.replace(tzinfo=None)) == [("2023-06-01", "2023-06-02")]


def test_multi_sentence_messages_split_into_sentences() -> None:
    assert split_sentences(
        "Hey Mel! Good to see you. I went to St. Louis with Dr. Smith last week. "
        "Also, I started pottery! [shares image: a bowl on a wheel]"
    ) == [
        "Hey Mel! Good to see you.",
        "I went to St. Louis with Dr. Smith last week.",
        "Also, I started pottery!",
        "shares image: a bowl on a wheel",
    ]


def test_paragraphs_and_list_items_are_sentences() -> None:
    assert split_sentences("Shopping list\n- eggs and milk\n- a new kettle") == [
        "Shopping list",
        "- eggs and milk",
        "- a new kettle",
    ]


@pytest.mark.parametrize(
    "content",
    ["Just one sentence here.", "Wow. Great!", "ok", "The price is 3.5 dollars. Ok."],
)
def test_a_single_sentence_has_no_derivatives(content: str) -> None:
    assert split_sentences(content) == []


def test_a_captioned_photo_is_two_sentences() -> None:
    assert split_sentences("Look at this! [shares image: a sunset over a lake]") == [
        "Look at this!",
        "shares image: a sunset over a lake",
    ]


def test_sentences_are_capped() -> None:
    content = " ".join(f"Sentence number {i} is here." for i in range(40))
    sentences = split_sentences(content)
    assert len(sentences) == MAX_DERIVATIVES
    assert sentences[0] == "Sentence number 0 is here."


def test_named_speakers_match_whole_names_and_first_names() -> None:
    speakers = ["Caroline", "Melanie", "Jon Snow", "assistant"]
    assert named_speakers("What did Caroline's mom give her?", speakers) == {"Caroline"}
    assert named_speakers("Where did jon go?", speakers) == {"Jon Snow"}
    assert named_speakers("How do Caroline and Melanie know each other?", speakers) == {
        "Caroline",
        "Melanie",
    }
    assert named_speakers("What did Carolineville build?", speakers) == set()
    assert named_speakers("What did she say?", speakers) == set()


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the support group?",
        "  when is the dentist appointment",
        "In which year did Audrey adopt her dogs?",
        "What date is the party?",
        "Which month did they move?",
        "How long ago did John start running?",
    ],
)
def test_questions_asking_when(query: str) -> None:
    assert asks_when(query)


@pytest.mark.parametrize(
    "query",
    [
        "Where did she go when it rained?",
        "What did Caroline research?",
        "How long is the trail?",
        "Whenever you can",
    ],
)
def test_questions_not_asking_when(query: str) -> None:
    assert not asks_when(query)


@pytest.mark.parametrize(
    "text",
    [
        "I went to a support group yesterday",
        "We adopted her last week!",
        "Last Friday I finished my screenplay",
        "Let's hike next month when it is cooler",
        "I started two weeks ago",
        "I've been painting a lot recently",
        "The fair was in May",
        "I've lived here since 2019",
        "a few days later it rained",
    ],
)
def test_messages_that_say_when(text: str) -> None:
    assert mentions_time(text)


@pytest.mark.parametrize(
    "text",
    ["I may go hiking", "That's a great photo!", "The week was long", "in the year of the dragon"],
)
def test_messages_that_do_not_say_when(text: str) -> None:
    assert not mentions_time(text)


def test_a_window_reads_the_messages_before_and_then_the_message() -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    said = [("Melanie", "Have you picked a topic?"), ("Caroline", "Yes: adoption agencies.")]
    assert window_text(said, timestamp=when) == (
        "8 May 2023 Melanie: Have you picked a topic?\nCaroline: Yes: adoption agencies."
    )
    own = episode_search_text("Yes: adoption agencies.", timestamp=when, producer=None, role="user")
    assert own == "8 May 2023 user: Yes: adoption agencies."
    # the words before add what the message lacks, each once; its own words are not repeated
    assert indexed_text(own, ["Have you picked a topic?", "Adoption is great, great!"]) == (
        "8 May 2023 user: Yes: adoption agencies.\npicked topic great"
    )
    assert indexed_text(own, ["Yes, agencies."]) == own
    assert indexed_text(own, []) == own


def test_sentence_spans_point_at_each_sentence_in_the_message() -> None:
    content = "We went  camping.\n\nIt was great,   really! Dr. Smith came. [shares image: a tent]"
    spans = sentence_spans(content)
    assert spans is not None
    assert [content[a:b] for a, b in spans] == [
        "We went  camping.",
        "It was great,   really! Dr. Smith came.",
        "shares image: a tent",
    ]
    assert len(spans) == len(split_sentences(content))
    assert sentence_spans("Just one sentence here.") == []


def test_a_window_layout_says_where_the_date_and_the_message_are() -> None:
    said = [("Ann", "What did you name the puppy?"), ("Bob", "Biscuit!")]
    layout = window_layout(said, timestamp=ANCHOR)
    assert layout.text == window_text(said, timestamp=ANCHOR)
    assert layout.text[: layout.day_end] == "2 June 2023"
    assert layout.text[layout.line_start :] == "Bob: Biscuit!"
    assert layout.text[layout.content_start :] == "Biscuit!"
    alone = window_layout(said[1:], timestamp=ANCHOR)
    assert alone.text == episode_search_text(
        "Biscuit!", timestamp=ANCHOR, producer="Bob", role="user"
    )
