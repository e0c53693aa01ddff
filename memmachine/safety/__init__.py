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
from memmachine.safety.settings import SafetySettings

__all__ = [
    "PII_KINDS",
    "JsonRedactionResult",
    "RedactionResult",
    "Redactor",
    "SafetySettings",
    "iban_is_valid",
    "looks_like_injection",
    "luhn_is_valid",
    "merge_counts",
    "ssn_is_valid",
]
