"""Cutting text into words, in scripts that put spaces between words and in those that do not.

A run of letters and digits (:data:`TERM_PATTERN`) is a word in most scripts. Chinese and
Japanese write no spaces, nor do Thai, Lao, Khmer and Myanmar: a run of their characters is a
whole phrase, so it is cut at every script change and then into overlapping character pairs
(bigrams, as Lucene's CJK analyser does): 我养了一只柯基 → 我养 养了 了一 一只 只柯 柯基. A query
typed without spaces is cut the same way, so any two adjacent characters it shares with a
memory match, whatever a dictionary would call a word. A lone character is kept as it is.
Letters of other scripts inside such a run ("iPhone手机") stay one word of their own.

Bigrams were measured against the jieba dictionary segmenter on XQuAD's Chinese questions and
paragraphs (bench/results/2026-11-29-analyser.md) and kept.
"""

from __future__ import annotations

import re

__all__ = ["TERM_PATTERN", "is_unspaced", "pieces"]

#: A term is a run of letters and digits (any script); everything else separates terms.
TERM_PATTERN = re.compile(r"[^\W_]+")

#: Scripts written without spaces between words: CJK ideographs (with extensions and
#: compatibility forms), kana, Thai, Lao, Khmer and Myanmar.
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff\u31f0-\u31ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\U00020000-\U0003134f"
)
_RUNS = re.compile(f"[{_UNSPACED}]+|[^{_UNSPACED}]+")
_UNSPACED_CHAR = re.compile(f"[{_UNSPACED}]")


def is_unspaced(word: str) -> bool:
    """Whether ``word`` (a piece from :func:`pieces`) is a bigram or lone character of a
    script written without spaces."""
    return _UNSPACED_CHAR.match(word) is not None


def pieces(token: str) -> list[str]:
    """``token`` (one :data:`TERM_PATTERN` run) as words: itself when it holds no character
    of an unspaced script, else its runs of such characters as bigrams (a lone character as
    it is) and its other runs whole, in order."""
    if _UNSPACED_CHAR.search(token) is None:
        return [token]
    words: list[str] = []
    for run in _RUNS.findall(token):
        if _UNSPACED_CHAR.match(run) is None or len(run) == 1:
            words.append(run)
        else:
            words.extend(run[i : i + 2] for i in range(len(run) - 1))
    return words
