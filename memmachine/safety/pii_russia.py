"""PII detectors for identifiers issued in Russia.

``national_id``:

- the internal passport (паспорт): a series of 4 digits (written 4 or 2+2) and a number of 6
  digits, optionally with ``№`` / ``номер`` / ``No.`` between them. It has no check digit,
  so it is taken only after a label: ``паспорт`` (any case ending), ``passport``, ``серия`` or
  ``серии``, at most 40 characters before the series on the same line ("паспорт: серия 45 06
  № 123456", "мой паспорт 4506 123456"). A 10-digit number with no such label is left as it
  is; a label written after the number ("4506 123456 — мой паспорт") is not read.
- the taxpayer number (ИНН): 12 digits with both check digits anywhere (a person's; one
  random 12-digit number in about 100 passes), or 10 or 12 digits with their check digits
  after ``ИНН`` / ``INN`` (a 10-digit one, an organisation's, passes for one random number
  in 10, so it needs the label).
- the insurance number (СНИЛС): ``XXX-XXX-XXX YY`` (or ``-YY``) with its check number
  anywhere, and 11 digits in any grouping after ``СНИЛС`` / ``SNILS``.

``phone``: numbers with the national trunk prefix 8: ``8 (916) 123-45-67``, ``8-916-123-45-67``,
``8 495 123 45 67`` (separated: any code) and ``89161234567`` (together: mobile codes 9xx
only). ``+7 ...`` numbers are the international detector's.

Labels keep their place in the text: ``ИНН 500100732259`` becomes ``ИНН [NATIONAL_ID]``.
"""

from __future__ import annotations

import re

from memmachine.safety.checksums import ascii_digits, inn_is_valid, snils_is_valid
from memmachine.safety.pii_base import AFTER, BEFORE, TOKENS, Detector

__all__ = ["NATIONAL_IDS", "PHONES"]

#: Latin and Russian letters: a label is a whole word of them.
_LETTERS = r"A-Za-z\u0410-\u044f\u0401\u0451"


def _label(words: str, gap: int) -> str:
    """A whole-word label, then up to ``gap`` characters other than digits on its line."""
    return rf"(?P<label>(?<![{_LETTERS}])(?:{words})(?![{_LETTERS}])[^\d\n]{{0,{gap}}})"


_PASSPORT = re.compile(
    _label(r"паспорт[\u0430-\u044f\u0451]{0,4}|passport|серия|серии", 40)
    + r"(?P<number>\d{2} ?\d{2}[ \t,]{0,3}(?:(?:№|N|No\.?|номер|number|#)[ \t.:]{0,3})?\d{6})"
    + AFTER,
    re.IGNORECASE,
)
_INN_LABELLED = re.compile(
    _label(r"инн|inn", 12) + rf"(?P<number>\d{{10}}(?:\d{{2}})?){AFTER}", re.IGNORECASE
)
#: Unlabelled, not a group of a longer dashed or dotted code (a UUID's last group).
_INN = re.compile(r"(?<![\dA-Za-z_.-])\d{12}(?![\dA-Za-z_-]|\.\d)")
_SNILS = re.compile(rf"{BEFORE}\d{{3}}-\d{{3}}-\d{{3}}[ -]\d{{2}}{AFTER}")
_SNILS_LABELLED = re.compile(
    _label(r"снилс|snils", 12) + rf"(?P<number>\d{{3}}(?:[ -]?\d{{3}}){{2}}[ -]?\d{{2}}){AFTER}",
    re.IGNORECASE,
)
_PHONE = re.compile(
    r"(?<![\dA-Za-z_+.-])8[ -]?(?:\(\d{3}\)|\d{3})[ -]?\d{3}[ -]?\d{2}[ -]?\d{2}"
    r"(?![\dA-Za-z_-]|\.\d)"
)


def _passport(match: re.Match[str]) -> str | None:
    return match["label"] + TOKENS["national_id"]


def _inn_labelled(match: re.Match[str]) -> str | None:
    valid = inn_is_valid(ascii_digits(match["number"]))
    return match["label"] + TOKENS["national_id"] if valid else None


def _inn(match: re.Match[str]) -> str | None:
    return TOKENS["national_id"] if inn_is_valid(ascii_digits(match.group())) else None


def _snils(match: re.Match[str]) -> str | None:
    return TOKENS["national_id"] if snils_is_valid(match.group()) else None


def _snils_labelled(match: re.Match[str]) -> str | None:
    return match["label"] + TOKENS["national_id"] if snils_is_valid(match["number"]) else None


def _phone(match: re.Match[str]) -> str | None:
    text = match.group()
    digits = ascii_digits(text)
    separated = not text.isdecimal()
    return TOKENS["phone"] if separated or digits.startswith("89") else None


NATIONAL_IDS: tuple[Detector, ...] = (
    Detector(_SNILS_LABELLED, _snils_labelled, ("снилс", "snils")),
    Detector(_SNILS, _snils),
    Detector(_INN_LABELLED, _inn_labelled, ("инн", "inn")),
    Detector(_INN, _inn),
    Detector(_PASSPORT, _passport, ("паспорт", "passport", "сери")),
)
PHONES: tuple[Detector, ...] = (Detector(_PHONE, _phone),)
