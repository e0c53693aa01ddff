"""Write-path safety settings (``MEMMACHINE_SAFETY_*``)."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from memmachine.config import _Section
from memmachine.safety.pii import PII_KINDS

__all__ = ["SafetySettings"]


class SafetySettings(_Section):
    """PII redaction and the memory-poisoning guard on every write (``MEMMACHINE_SAFETY_*``).

    ``pii_kinds`` takes a JSON list or a comma-separated string
    (``MEMMACHINE_SAFETY_PII_KINDS=email,phone``); see :mod:`memmachine.safety.pii` for
    the kinds.
    """

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_SAFETY_", extra="ignore")
    yaml_section: ClassVar[str | None] = "safety"

    #: Replace personal data with ``[EMAIL]``-style tokens before anything is stored.
    redact_pii: bool = True
    #: Which detectors run when ``redact_pii`` is on.
    pii_kinds: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(PII_KINDS))
    #: Refuse facts that read as instructions to the model, and mark such episodes.
    block_injected_facts: bool = True

    @field_validator("pii_kinds", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("pii_kinds")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(PII_KINDS))
        if unknown:
            raise ValueError(f"unknown PII kind(s) {unknown}; choose from {list(PII_KINDS)}")
        return value
