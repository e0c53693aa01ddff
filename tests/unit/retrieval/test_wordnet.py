"""The WordNet reader on a fixture written in WordNet's own format: a category's members, a
word's categories, nouns' base forms, and a clear error for a directory it cannot use."""

from __future__ import annotations

from pathlib import Path

import pytest

from memmachine.errors import ConfigurationError
from memmachine.retrieval.categories import category_members, question_nouns
from memmachine.retrieval.wordnet import load_lexicon
from tests.wordnet_fixture import SPORTS, write_wordnet


@pytest.fixture
def wordnet(tmp_path: Path) -> Path:
    return write_wordnet(tmp_path / "wordnet")


def test_a_category_reaches_its_members_as_deep_as_asked(wordnet: Path) -> None:
    lexicon = load_lexicon(wordnet)
    one_step = lexicon.members("sport", depth=1, senses=1)
    assert one_step is not None
    assert {"basketball", "hoops", "skiing", "water_sport", "martial_art"} <= one_step
    assert "surfing" not in one_step
    assert "karate" not in one_step
    two_steps = lexicon.members("sport", depth=2, senses=1)
    assert two_steps is not None
    assert {"surfing", "surfboarding", "karate"} <= two_steps
    # the category's own synset (its synonyms) is not among its members
    assert "sport" not in two_steps
    assert "athletics" not in two_steps


def test_the_first_sense_leaves_the_other_meanings_out(wordnet: Path) -> None:
    lexicon = load_lexicon(wordnet)
    assert "mutation" not in (lexicon.members("sport", senses=1) or set())
    assert "mutation" in (lexicon.members("sport") or set())


def test_a_category_with_more_members_than_the_limit_gives_none(wordnet: Path) -> None:
    lexicon = load_lexicon(wordnet)
    assert lexicon.members("dog", limit=2) == {"puppy", "poodle"}
    assert lexicon.members("thing", limit=3) is None
    assert lexicon.members("sport", depth=1, limit=len(SPORTS)) is None


def test_a_word_reaches_its_categories(wordnet: Path) -> None:
    lexicon = load_lexicon(wordnet)
    assert lexicon.categories("surfing", depth=2, senses=1) == {
        "water_sport",
        "aquatics",
        "sport",
        "athletics",
    }
    assert "entity" in lexicon.categories("surfing")


def test_plurals_and_irregular_forms_reduce_to_the_noun(wordnet: Path) -> None:
    lexicon = load_lexicon(wordnet)
    assert lexicon.base_forms("sports") == ["sport"]
    assert lexicon.base_forms("puppies") == ["puppy"]
    assert lexicon.base_forms("children") == ["child"]
    assert lexicon.base_forms("Geese") == ["goose"]
    assert lexicon.base_forms("martial_arts") == ["martial_art"]
    assert lexicon.base_forms("quickly") == []


def test_the_question_nouns_and_their_members(wordnet: Path) -> None:
    lexicon = load_lexicon(wordnet)
    nouns = question_nouns(lexicon, "What sports and martial arts does John like besides hoops?")
    assert nouns == ["sport", "martial_art", "hoops"]  # "John" is a name, "arts" no noun here
    members = category_members(lexicon, ["sport"], depth=2, senses=1, limit=100)
    assert "surfing" in members
    assert "karate" in members
    assert "water_sport" not in members  # a compound cannot be searched as one word
    assert members == sorted(members)
    # the question's own nouns are left to full text; a category too general adds nothing
    assert "hoops" not in category_members(lexicon, nouns, depth=2, senses=1, limit=100)
    assert category_members(lexicon, ["sport"], depth=2, senses=1, limit=5) == []


def test_a_missing_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_lexicon(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match=r"index\.noun"):
        load_lexicon(tmp_path / "empty")


def test_a_file_not_in_wordnet_format_is_a_configuration_error_naming_the_line(
    wordnet: Path,
) -> None:
    data = wordnet / "data.noun"
    lines = data.read_text().splitlines(keepends=True)
    data.write_text("".join(lines[:3]) + "00000042 03 n zz broken\n" + "".join(lines[3:]))
    with pytest.raises(ConfigurationError, match=r"data\.noun, line 4"):
        load_lexicon(wordnet)
    write_wordnet(wordnet)
    (wordnet / "index.noun").write_text("sport n 1 0 1 0 99999999\n")
    with pytest.raises(ConfigurationError, match="names synset 99999999"):
        load_lexicon(wordnet)
