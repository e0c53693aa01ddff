"""PII detectors for identifiers issued in mainland China.

``national_id``: the resident identity card number (居民身份证号码), 18 characters written
together or as 6-8-4 groups with one space or dash: kept only when the province code, the
birth date and the ISO 7064 MOD 11-2 check character (the last, ``X`` for 10) are right, so
that one random 18-digit number (an order id) in about 4,000 is taken for one. The 15-digit
cards issued before 1999 carry no check digit and are not detected.

``phone``:

- mobile numbers: ``1[3-9]`` and 9 more digits, together or as 3-4-4 groups (spaces or
  dashes), with or without ``+86`` / ``0086`` / ``86`` / ``(+86)`` in front. Every 11-digit
  number of that shape is one: this is the form, and no check digit tells it from an id.
- landlines with their trunk prefix: ``010-12345678``, ``0755-8765432``, ``(0755)87654321``
  (10-12 digits; the dash or parentheses are required).

Full-width digits and parentheses (U+FF10-U+FF19, U+FF08, U+FF09), as Chinese input methods
type them, count as their ASCII forms.
"""

from __future__ import annotations

import re

from memmachine.safety.checksums import ascii_digits, cn_resident_id_is_valid
from memmachine.safety.pii_base import AFTER, BEFORE, TOKENS, Detector

__all__ = ["NATIONAL_IDS", "PHONES"]

_RESIDENT_ID = re.compile(rf"{BEFORE}\d{{6}}(?P<s>[ -]?)\d{{8}}(?P=s)\d{{3}}[\dXx]{AFTER}")

_MOBILE = re.compile(
    r"(?<![\dA-Za-z_+])"
    r"(?:(?:\+|00)?86[ -]?|[(\uff08]\+?86[)\uff09][ -]?)?"
    rf"[1\uff11][3-9\uff13-\uff19]\d(?P<s>[ -]?)\d{{4}}(?P=s)\d{{4}}{AFTER}"
)
_LANDLINE = re.compile(rf"{BEFORE}(?:0\d{{2,3}}-|[(\uff08]0\d{{2,3}}[)\uff09][ ]?)\d{{7,8}}{AFTER}")


def _resident_id(match: re.Match[str]) -> str | None:
    return TOKENS["national_id"] if cn_resident_id_is_valid(match.group()) else None


def _mobile(match: re.Match[str]) -> str | None:
    return TOKENS["phone"]


def _landline(match: re.Match[str]) -> str | None:
    return TOKENS["phone"] if 10 <= len(ascii_digits(match.group())) <= 12 else None


NATIONAL_IDS: tuple[Detector, ...] = (Detector(_RESIDENT_ID, _resident_id),)
PHONES: tuple[Detector, ...] = (Detector(_MOBILE, _mobile), Detector(_LANDLINE, _landline))
