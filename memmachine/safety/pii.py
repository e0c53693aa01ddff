"""PII redaction: find personal data in text and replace it with a token naming its kind.

Detectors (``kind`` → token), applied in this order so that a longer, more specific match
wins over a shorter one inside it:

``email`` → ``[EMAIL]``
    ``local@domain.tld``: a local part of up to 64 characters and a dotted domain ending in
    an alphabetic top-level label.
``iban`` → ``[IBAN]``
    Two capital letters, two check digits and 11-30 letters/digits, optionally grouped by
    single spaces; kept only when the length fits the country (for the countries listed in
    ``checksums._IBAN_LENGTHS``, 15-34 otherwise) and the ISO 13616 mod-97 check gives 1.
``card`` → ``[CARD]``
    13-19 digits written contiguously, as 4-4-4-4(-1..3) groups or as 4-6-4/5 (Amex, Diners)
    groups with one consistent separator (space or dash); kept only when the Luhn check
    passes and the digits are not all the same, so order and invoice numbers stay. An
    18-digit Chinese resident identity card number that happens to pass Luhn is left to
    ``national_id``.
``national_id`` → ``[NATIONAL_ID]``
    - Chinese resident identity card numbers (:mod:`memmachine.safety.pii_china`).
    - Russian passport numbers, ИНН and СНИЛС (:mod:`memmachine.safety.pii_russia`).
    - US SSN ``123-45-6789`` (dashes or spaces): area not 000, 666 or 900-999; group not 00;
      serial not 0000.
    - UK National Insurance number ``AB 12 34 56 C``: capital letters, the first two from the
      allowed prefix letters (no D, F, I, Q, U, V; second letter not O) and not one of the
      unused prefixes BG, GB, KN, NK, NT, TN, ZZ; suffix A-D.
    - Canadian SIN ``123-456-782`` (dashes or spaces, separators required): Luhn-valid, first
      digit not 0 or 8.
    - Spanish DNI ``12345678Z`` and NIE ``X1234567L``: the control letter must match the
      number (mod 23).
``account`` → ``[ACCOUNT]``
    6-20 digits (spaces or dashes allowed) that directly follow a label such as "account",
    "acct", "a/c", "account no.", "account number" or "account #"; the label stays.
``phone`` → ``[PHONE]``
    - international: ``+`` (or ``(+44)``) and a country code, then 8-15 digits in all,
      grouped by spaces, dots, dashes or parentheses: ``+7 (495) 123-45-67``,
      ``+86 10 1234 5678``, ``+33 1 23 45 67 89``, ``+91 98765 43210``;
    - Chinese mobiles and landlines (:mod:`memmachine.safety.pii_china`) and Russian numbers
      with the trunk prefix 8 (:mod:`memmachine.safety.pii_russia`);
    - North American ``(555) 123-4567`` / ``555-123-4567`` / ``555.123.4567``;
    - national trunk-prefixed ``020 7946 0958``, ``07700-900-123`` (a leading 0, 10-11
      digits, separated groups) and ``06 12 34 56 78``.
    Dates (``2024-01-15``, ``15.01.2024``), times, version numbers and numbers with fewer
    than 10 digits (8 with a ``+``) are not phone numbers.

A match never touches a digit or a Latin letter on either side (it is not part of a longer
number or code), while a Chinese or Cyrillic character may touch it: ``我的手机号是13912345678。``
loses the number and keeps every character around it (:mod:`memmachine.safety.pii_base`).
Digits may be full-width (U+FF10-U+FF19, as Chinese input methods type them) or of any
script.

Every pattern is bounded (no unbounded quantifier that can backtrack over the input), so
redaction runs in time linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memmachine.models import PII_KINDS
from memmachine.safety import pii_china, pii_russia
from memmachine.safety.checksums import (
    ascii_digits,
    cn_resident_id_is_valid,
    iban_is_valid,
    luhn_is_valid,
    ssn_is_valid,
)
from memmachine.safety.pii_base import TOKENS, Detector, Replacer

__all__ = [
    "PII_KINDS",
    "TOKENS",
    "JsonRedactionResult",
    "RedactionResult",
    "Redactor",
    "iban_is_valid",
    "luhn_is_valid",
    "merge_counts",
    "ssn_is_valid",
]


@dataclass(frozen=True)
class RedactionResult:
    """The redacted text and how many of each kind were replaced (kinds found only)."""

    text: str
    found: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class JsonRedactionResult:
    """A JSON value with every string redacted (keys untouched), and the counts."""

    value: Any
    found: dict[str, int] = field(default_factory=dict)


def merge_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    """The per-kind sum of ``counts``."""
    out: dict[str, int] = {}
    for one in counts:
        for kind, count in one.items():
            out[kind] = out.get(kind, 0) + count
    return out


_NI_BAD_PREFIXES = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _digits(text: str) -> str:
    return ascii_digits(text)


# ---------------------------------------------------------------------------- patterns

_EMAIL = re.compile(
    r"(?<![\dA-Za-z_.%+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}(?![\dA-Za-z_-])"
)

_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\dA-Za-z_])"
)

_CARD = re.compile(
    r"(?<![\dA-Za-z_-])(?:"
    r"\d{13,19}"
    r"|\d{4}(?P<s1>[ -])\d{4}(?P=s1)\d{4}(?P=s1)\d{4}(?:(?P=s1)\d{1,3})?"
    r"|\d{4}(?P<s2>[ -])\d{6}(?P=s2)\d{4,5}"
    r")(?![\dA-Za-z_-])"
)

_SSN = re.compile(
    r"(?<![\dA-Za-z_-])(?P<area>\d{3})(?P<sep>[- ])(?P<group>\d{2})(?P=sep)(?P<serial>\d{4})"
    r"(?![\dA-Za-z_-])"
)
_UK_NI = re.compile(
    r"(?<![\dA-Za-z_])(?P<prefix>[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z])"
    r"(?P<sep> ?)\d{2}(?P=sep)\d{2}(?P=sep)\d{2}(?P=sep)[A-D](?![\dA-Za-z_])"
)
_CA_SIN = re.compile(r"(?<![\dA-Za-z_-])[1-79]\d{2}(?P<sep>[- ])\d{3}(?P=sep)\d{3}(?![\dA-Za-z_-])")
_ES_DNI = re.compile(
    r"(?<![\dA-Za-z_])(?P<prefix>[XYZ]?)(?P<number>\d{7,8})-?(?P<letter>[A-Z])(?![\dA-Za-z_])"
)

_ACCOUNT = re.compile(
    r"(?P<label>\b(?:account|acct|a/c)\.?"
    r"(?:[ \t]{0,3}(?:no\.?|nr\.?|number|num\.?|#))?[ \t]{0,3}[:#]?[ \t]{0,3})"
    r"(?P<number>\d(?:[ -]?\d){5,19})(?![\dA-Za-z_-])",
    re.IGNORECASE,
)

_PHONE_INTL = re.compile(
    r"(?<![\dA-Za-z_+(\uff08])"
    r"(?:[(\uff08]\+\d{1,4}[)\uff09][ ]?\d[\d ().-]{4,22}|\+\d[\d ().-]{6,22})\d"
    r"(?![\dA-Za-z_-]|\.\d)"
)
_PHONE_NANP = re.compile(
    r"(?<![\dA-Za-z_.+-])(?:\(\d{3}\)[ ]?\d{3}[-. ]|\d{3}(?P<sep>[-. ])\d{3}(?P=sep))\d{4}"
    r"(?![\dA-Za-z_-]|\.\d)"
)
_PHONE_TRUNK = re.compile(
    r"(?<![\dA-Za-z_.+-])(?:0\d{2,4}[ -]\d{3,4}[ -]?\d{3,4}|0\d(?:[ .]\d{2}){4})"
    r"(?![\dA-Za-z_-]|\.\d)"
)


# ---------------------------------------------------------------------------- detectors

_DIGIT = re.compile(r"\d")


def _email(match: re.Match[str]) -> str | None:
    return TOKENS["email"]


def _iban(match: re.Match[str]) -> str | None:
    return TOKENS["iban"] if iban_is_valid(match.group()) else None


def _card(match: re.Match[str]) -> str | None:
    digits = _digits(match.group())
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1 or not luhn_is_valid(digits):
        return None
    if len(digits) == 18 and cn_resident_id_is_valid(digits):
        return None  # a resident identity card number, the national_id detector's
    return TOKENS["card"]


def _ssn(match: re.Match[str]) -> str | None:
    valid = ssn_is_valid(match["area"], match["group"], match["serial"])
    return TOKENS["national_id"] if valid else None


def _uk_ni(match: re.Match[str]) -> str | None:
    return None if match["prefix"] in _NI_BAD_PREFIXES else TOKENS["national_id"]


def _ca_sin(match: re.Match[str]) -> str | None:
    return TOKENS["national_id"] if luhn_is_valid(_digits(match.group())) else None


def _es_dni(match: re.Match[str]) -> str | None:
    prefix, number = match["prefix"], match["number"]
    if prefix:
        if len(number) != 7:
            return None
        number = str("XYZ".index(prefix)) + number
    elif len(number) != 8:
        return None
    expected = _DNI_LETTERS[int(number) % 23]
    return TOKENS["national_id"] if match["letter"] == expected else None


def _account(match: re.Match[str]) -> str | None:
    return match["label"] + TOKENS["account"]


def _phone_intl(match: re.Match[str]) -> str | None:
    text = match.group()
    if re.search(r"[ ().-]{2}", text.replace(") ", ")").replace(" (", "(")):
        return None
    digits = _digits(text)
    return TOKENS["phone"] if 8 <= len(digits) <= 15 else None


def _phone_national(match: re.Match[str]) -> str | None:
    digits = _digits(match.group())
    return TOKENS["phone"] if 10 <= len(digits) <= 11 else None


#: Each kind's detectors in the order they run: the more specific first (a labelled or
#: check-digited identifier before a shape that could take part of it).
_DETECTORS: Mapping[str, tuple[Detector, ...]] = {
    "email": (Detector(_EMAIL, _email),),
    "iban": (Detector(_IBAN, _iban),),
    "card": (Detector(_CARD, _card),),
    "national_id": (
        *pii_china.NATIONAL_IDS,
        *pii_russia.NATIONAL_IDS,
        Detector(_SSN, _ssn),
        Detector(_UK_NI, _uk_ni),
        Detector(_CA_SIN, _ca_sin),
        Detector(_ES_DNI, _es_dni),
    ),
    "account": (Detector(_ACCOUNT, _account, ("account", "acct", "a/c")),),
    "phone": (
        Detector(_PHONE_INTL, _phone_intl),
        *pii_china.PHONES,
        *pii_russia.PHONES,
        Detector(_PHONE_NANP, _phone_national),
        Detector(_PHONE_TRUNK, _phone_national),
    ),
}


class Redactor:
    """Replaces the PII kinds it was built with; see the module docstring for each kind.

    ``kinds`` defaults to every kind in :data:`PII_KINDS`; an unknown kind raises
    ``ValueError``. The order of ``kinds`` does not matter: detectors always run in
    :data:`PII_KINDS` order.
    """

    def __init__(self, kinds: Iterable[str] | None = None) -> None:
        wanted = set(PII_KINDS if kinds is None else kinds)
        unknown = wanted - set(PII_KINDS)
        if unknown:
            raise ValueError(
                f"unknown PII kind(s) {sorted(unknown)}; choose from {list(PII_KINDS)}"
            )
        self.kinds: tuple[str, ...] = tuple(kind for kind in PII_KINDS if kind in wanted)

    def redact(self, text: str) -> RedactionResult:
        """``text`` with every detected item replaced by its kind's token."""
        found: dict[str, int] = {}
        # Every kind but email is made of digits: a text without one can hold only emails.
        kinds = self.kinds if _DIGIT.search(text) else ("email",) if "@" in text else ()
        lowered = text.lower()
        for kind in kinds:
            if kind not in self.kinds:
                continue
            for detector in _DETECTORS[kind]:
                if detector.words and not any(word in lowered for word in detector.words):
                    continue
                text = _substitute(detector.pattern, detector.replace, text, kind, found)
        return RedactionResult(text=text, found=found)

    def redact_json(self, value: Any) -> JsonRedactionResult:
        """A copy of a JSON-like value (dicts, lists, tuples, scalars) with every string value
        redacted; dict keys and non-string scalars are kept as they are."""
        found: dict[str, int] = {}
        redacted = self._redact_value(value, found)
        return JsonRedactionResult(value=redacted, found=found)

    def _redact_value(self, value: Any, found: dict[str, int]) -> Any:
        if isinstance(value, str):
            result = self.redact(value)
            for kind, count in result.found.items():
                found[kind] = found.get(kind, 0) + count
            return result.text
        if isinstance(value, Mapping):
            return {key: self._redact_value(item, found) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._redact_value(item, found) for item in value]
        return value


def _substitute(
    pattern: re.Pattern[str], replacer: Replacer, text: str, kind: str, found: dict[str, int]
) -> str:
    def replace(match: re.Match[str]) -> str:
        token = replacer(match)
        if token is None:
            return match.group()
        found[kind] = found.get(kind, 0) + 1
        return token

    return pattern.sub(replace, text)
