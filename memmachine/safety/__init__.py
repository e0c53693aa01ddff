"""Write-path safety: PII redaction and the memory-poisoning guard."""

from __future__ import annotations

from memmachine.safety.checksums import (
    cn_resident_id_is_valid,
    inn_is_valid,
    snils_is_valid,
)
from memmachine.safety.pii import (
    PII_KINDS,
    JsonRedactionResult,
    RedactionResult,
    Redactor,
    iban_is_valid,
    luhn_is_valid,
    merge_counts,
    ssn_is_valid,
)
from memmachine.safety.poisoning import looks_like_injection

__all__ = [
    "PII_KINDS",
    "JsonRedactionResult",
    "RedactionResult",
    "Redactor",
    "cn_resident_id_is_valid",
    "iban_is_valid",
    "inn_is_valid",
    "looks_like_injection",
    "luhn_is_valid",
    "merge_counts",
    "snils_is_valid",
    "ssn_is_valid",
]
