"""The check-digit and plausibility rules the PII detectors keep a match by.

Each function takes the identifier as written (separators allowed where noted) and answers
whether it is well formed: so that a number that merely has the right length (an order id, a
tracking number) is left in the text. Digits may be ASCII or any Unicode decimal digit (a
full-width digit, U+FF10-U+FF19, typed by a Chinese input method counts as its ASCII digit).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from datetime import date

__all__ = [
    "ascii_digits",
    "cn_resident_id_is_valid",
    "iban_is_valid",
    "inn_is_valid",
    "luhn_is_valid",
    "snils_is_valid",
    "ssn_is_valid",
]


def ascii_digits(text: str) -> str:
    """The decimal digits of ``text`` as ASCII digits, everything else dropped."""
    return "".join(str(unicodedata.digit(char)) for char in text if char.isdecimal())


def luhn_is_valid(digits: str) -> bool:
    """The Luhn (mod 10) check over a string of digits."""
    if not digits.isdigit():
        return False
    total = 0
    for position, char in enumerate(reversed(ascii_digits(digits))):
        value = ord(char) - 48
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


#: IBAN lengths of common countries (ISO 13616 registry); others must be 15-34 long.
_IBAN_LENGTHS: Mapping[str, int] = {
    "AD": 24, "AT": 20, "BE": 16, "BG": 22, "CH": 21, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GR": 27, "HR": 21,
    "HU": 28, "IE": 22, "IS": 26, "IT": 27, "LI": 21, "LT": 20, "LU": 20, "LV": 21,
    "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PL": 28, "PT": 25, "RO": 24, "SA": 24,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TR": 26, "AE": 23, "IL": 23, "UA": 29,
    "AZ": 28, "BH": 22, "BR": 29, "BY": 28, "CR": 22, "DO": 28, "EG": 29, "GE": 22,
    "GI": 23, "GT": 28, "IQ": 23, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MU": 30, "PK": 24, "PS": 29, "QA": 29,
    "RS": 22, "SC": 31, "TL": 23, "TN": 24, "VG": 24, "XK": 20, "AL": 28, "BA": 20,
    "FO": 18, "GL": 18,
}  # fmt: skip


def iban_is_valid(iban: str) -> bool:
    """Country length (when known) and the ISO 13616 mod-97 check of an IBAN (spaces
    ignored, any country)."""
    compact = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}", compact):
        return False
    expected = _IBAN_LENGTHS.get(compact[:2])
    if expected is not None and len(compact) != expected:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in rearranged)
    return int(number) % 97 == 1


def ssn_is_valid(area: str, group: str, serial: str) -> bool:
    """Whether a US SSN's parts are in ranges the SSA issues."""
    if area in ("000", "666") or area.startswith("9"):
        return False
    return group != "00" and serial != "0000"


#: The first two digits of a resident identity card number: the province-level division
#: (GB/T 2260), with 71 (Taiwan), 81-83 (Hong Kong, Macau, Taiwan residence permits) and 91.
_CN_PROVINCES = frozenset(
    {"11", "12", "13", "14", "15", "21", "22", "23", "31", "32", "33", "34", "35", "36", "37"}
    | {"41", "42", "43", "44", "45", "46", "50", "51", "52", "53", "54", "61", "62", "63"}
    | {"64", "65", "71", "81", "82", "83", "91"}
)
_CN_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def cn_resident_id_is_valid(number: str) -> bool:
    """A Chinese resident identity card number (GB 11643-1999): 18 characters once spaces
    and dashes are dropped, a known province code, a real birth date between 1900 and 2099,
    and the ISO 7064 MOD 11-2 check character (``X`` standing for 10) last."""
    compact = number.replace(" ", "").replace("-", "").upper()
    if len(compact) != 18 or (compact[-1] != "X" and not compact[-1].isdecimal()):
        return False
    body = ascii_digits(compact[:17])
    if len(body) != 17 or body[:2] not in _CN_PROVINCES:
        return False
    year, month, day = int(body[6:10]), int(body[10:12]), int(body[12:14])
    if not 1900 <= year <= 2099:
        return False
    try:
        date(year, month, day)
    except ValueError:
        return False
    total = sum(int(digit) * weight for digit, weight in zip(body, _CN_WEIGHTS, strict=True))
    check = compact[-1] if compact[-1] == "X" else ascii_digits(compact[-1])
    return "10X98765432"[total % 11] == check


_INN_10 = (2, 4, 10, 3, 5, 9, 4, 6, 8)
_INN_11 = (7, 2, 4, 10, 3, 5, 9, 4, 6, 8)
_INN_12 = (3, 7, 2, 4, 10, 3, 5, 9, 4, 6, 8)


def _inn_digit(digits: str, weights: tuple[int, ...]) -> int:
    return sum(int(d) * w for d, w in zip(digits, weights, strict=False)) % 11 % 10


def inn_is_valid(number: str) -> bool:
    """A Russian taxpayer number (ИНН): 10 digits (an organisation) with one check digit or
    12 digits (a person) with two, and a region code other than 00."""
    digits = ascii_digits(number)
    if len(digits) != len(number) or digits[:2] == "00":
        return False
    if len(digits) == 10:
        return _inn_digit(digits, _INN_10) == int(digits[9])
    if len(digits) == 12:
        return _inn_digit(digits, _INN_11) == int(digits[10]) and _inn_digit(
            digits, _INN_12
        ) == int(digits[11])
    return False


def snils_is_valid(number: str) -> bool:
    """A Russian insurance number (СНИЛС): 11 digits once separators are dropped, the last
    two the check number of the first nine (the sum of each digit times 9 down to 1; below
    100 it is the sum, else its remainder mod 101, 100 written 00)."""
    digits = ascii_digits(number)
    if len(digits) != 11 or len(set(digits[:9])) == 1:
        return False
    total = sum(int(digit) * (9 - index) for index, digit in enumerate(digits[:9]))
    check = total if total < 100 else total % 101
    return check % 100 == int(digits[9:]) if check != 100 else digits[9:] == "00"
