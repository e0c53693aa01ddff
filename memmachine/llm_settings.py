"""Which language model, if any, does the off-the-hot-path work (``MEMMACHINE_LLM_*``).

Each setting is read from ``MEMMACHINE_LLM_<NAME>``, else from the usual OpenAI variable
(``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``), else from the ``llm:`` mapping of
the YAML file named by ``MEMMACHINE_CONFIG``, else the default. Values passed in code win.

The model is *enabled* only when a model name and a way to reach it (a base URL, or an API key
for OpenAI itself) are configured. Without one, everything that needs no language model still
works; :func:`build_language_model` says why the rest is off.

Nothing here opens a connection or imports the ``openai`` client until a model is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from memmachine.config import _Section

if TYPE_CHECKING:
    from memmachine.ports import LanguageModel

__all__ = ["LLM_OFF_REASON", "LlmSettings", "build_language_model"]

LLM_OFF_REASON = "no LLM configured (set MEMMACHINE_LLM_MODEL and MEMMACHINE_LLM_BASE_URL)"


class LlmSettings(_Section):
    """The OpenAI-compatible chat endpoint (OpenAI, Azure, vLLM, Ollama, LiteLLM...)."""

    model_config = SettingsConfigDict(
        env_prefix="MEMMACHINE_LLM_", extra="ignore", populate_by_name=True
    )
    yaml_section: ClassVar[str | None] = "llm"

    #: The API root, e.g. ``http://localhost:11434/v1``; unset with an API key = OpenAI.
    base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("MEMMACHINE_LLM_BASE_URL", "OPENAI_BASE_URL")
    )
    #: The model name sent to the endpoint, e.g. ``gpt-4o-mini`` or ``llama3.1:8b``.
    model: str | None = Field(
        default=None, validation_alias=AliasChoices("MEMMACHINE_LLM_MODEL", "OPENAI_MODEL")
    )
    #: Sent as a bearer token; local servers usually need none.
    api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("MEMMACHINE_LLM_API_KEY", "OPENAI_API_KEY")
    )
    timeout_seconds: float = Field(default=60.0, gt=0)
    #: Retries of a failed request (connection errors, timeouts, 429, 5xx), with backoff.
    max_retries: int = Field(default=3, ge=0, le=10)

    @property
    def enabled(self) -> bool:
        """True when a model and a base URL or an API key are configured."""
        has_key = self.api_key is not None and bool(self.api_key.get_secret_value())
        return bool(self.model) and (bool(self.base_url) or has_key)


def build_language_model(settings: LlmSettings) -> tuple[LanguageModel | None, str]:
    """The configured language model, not yet started, and ``""``; or ``None`` and the reason
    it is off. The caller awaits ``start()`` and ``close()``."""
    if not settings.enabled or settings.model is None:
        return None, LLM_OFF_REASON
    from memmachine.adapters.openai_language_model import OpenAILanguageModel

    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    model = OpenAILanguageModel(
        settings.base_url,
        settings.model,
        api_key=api_key,
        timeout=settings.timeout_seconds,
        max_retries=settings.max_retries,
    )
    return model, ""
