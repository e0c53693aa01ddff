"""The shared analyser reads each text in its own language: segmentation of scripts written
without spaces, a stemmer and stopwords per language, mixed text kept whole, and queries that
match their documents however short they are."""

# Text in other scripts is this module's subject: its letters are meant, not confusables.
# ruff: noqa: RUF003

from __future__ import annotations

import pytest

from memmachine.indexing.language_detection import detect_language, likely_language
from memmachine.indexing.terms import ANALYSER_VERSION, analyse, document_terms, query_terms


def test_the_analyser_version_names_the_languages_change() -> None:
    assert ANALYSER_VERSION == 3


def test_chinese_is_cut_into_overlapping_character_pairs() -> None:
    assert document_terms("我养了柯基犬") == ["我养", "养了", "了柯", "柯基", "基犬"]
    assert document_terms("狗") == ["狗"]


def test_japanese_kana_and_kanji_are_cut_the_same_way() -> None:
    assert document_terms("東京に住む") == ["東京", "京に", "に住", "住む"]


@pytest.mark.parametrize(
    ("query", "memory"),
    [
        ("豆豆柯基", "我养了一只叫豆豆的柯基犬"),  # typed without spaces, other order
        ("лыжи", "Я катаюсь на лыжах каждую зиму"),  # another case
        ("врача", "Мой брат работает врачом"),
        ("ёлка", "Мы нарядили елку"),  # ё written as е
        ("¿Dónde viven mis hijos?", "Mis hijos viven en Madrid desde el año pasado"),
        ("Wo wohnen meine Kinder?", "Meine Kinder wohnen seit letztem Jahr in Berlin"),
        ("Где живут дети?", "Мои дети живут в Казани"),
        ("hiking", "We hiked in the hills"),
    ],
)
def test_a_query_shares_terms_with_its_memory(query: str, memory: str) -> None:
    assert set(query_terms(query)) & set(document_terms(memory)), (query, memory)


def test_each_language_drops_its_own_stopwords() -> None:
    assert "и" not in document_terms("Я люблю чай и кофе")
    assert "el" not in document_terms("El perro come la comida de la mañana todos los días")
    assert "und" not in document_terms("Ich trinke Kaffee und Tee jeden Morgen mit Milch")
    # an English stopword is no stopword in a Russian text's Russian words, and vice versa
    assert "the" not in document_terms("Where is the dog?")


def test_mixed_text_keeps_both_parts() -> None:
    chinese = document_terms("我昨天买了新的iPhone手机")
    assert {"iphon", "手机", "昨天"} <= set(chinese)
    russian = document_terms("Сервер prod-db01 упал ночью")
    assert {"prod", "db01", "сервер", "упа"} <= set(russian)
    english = document_terms("We ate борщ in Moscow")
    assert "борщ" in english


def test_english_stays_as_it_was() -> None:
    assert document_terms("The CAT sat on the mat") == ["cat", "sat", "mat"]
    assert query_terms("Who went hiking?") == ["went", "hike"]
    assert document_terms("cafés") == ["cafés"]  # only ASCII words are English-stemmed


def test_language_detection_is_confident_or_silent() -> None:
    assert detect_language("Я катаюсь на лыжах каждую зиму в Сочи") == "ru"
    assert detect_language("我每天早上都喝一杯黑咖啡") == "zh"
    assert detect_language("Meine Kinder wohnen seit letztem Jahr in Berlin") == "de"
    assert detect_language("2024-05-01 !!!") is None
    assert likely_language("ok") is not None  # a guess, however unsure


def test_a_given_language_overrides_detection() -> None:
    # "Gift" is poison in German and a present in English
    assert analyse("gifts", "en") == ["gift"]
    assert analyse("Gifte", "de") == ["gift"]
    assert query_terms("los niños", language="es") == ["niñ"]


def test_a_query_in_an_uncertain_language_also_tries_the_script_default() -> None:
    terms = query_terms("casas azules")
    assert "cas" in terms or "casa" in terms
