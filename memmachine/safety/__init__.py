"""Write-path safety: PII redaction and the memory-poisoning guard."""

from __future__ import annotations

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
    "iban_is_valid",
    "looks_like_injection",
    "luhn_is_valid",
    "merge_counts",
    "ssn_is_valid",
]
