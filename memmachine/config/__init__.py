"""Settings: environment variables (``MEMMACHINE_*``), optionally a YAML file, through
pydantic-settings.

Precedence, highest first:

1. values passed to ``Settings(...)`` in code (the CLI's ``--host``/``--port``/``--data-dir``);
2. environment variables (``MEMMACHINE_EPISODE_STORE_URL``, ``MEMMACHINE_EMBEDDING_MODEL``, ...);
3. the YAML file named by ``MEMMACHINE_CONFIG``, if set;
4. the defaults below.

The file's keys mirror the settings: top-level fields by name (``episode_store_url``), or
grouped by their first words (``episode_store: {url: ..., password: ...}``,
``startup: {timeout_seconds: 30}``), and the sections ``embedding``, ``reranker``, ``limits``
and ``retrieval`` as nested mappings. An unknown key in the file is an error, not a silent no-op.

Store credentials come from the URL's userinfo or from their own variables
(``MEMMACHINE_EPISODE_STORE_USER`` / ``_PASSWORD``, ``MEMMACHINE_PROFILE_STORE_PASSWORD``,
``MEMMACHINE_WORKING_STORE_PASSWORD``): **the URL wins** for each part it carries, a variable
fills in what the URL leaves out. URLs and passwords are ``SecretStr``; log them only through
:func:`redact_url` / :meth:`Settings.describe`.

Nothing here opens a connection; :mod:`memmachine.bootstrap` turns settings into adapters.
The YAML source is in :mod:`~memmachine.config.sources`, the sections in
:mod:`~memmachine.config.sections`, :class:`Settings` in :mod:`~memmachine.config.settings`
and URL handling in :mod:`~memmachine.config.urls`.
"""

from __future__ import annotations

from memmachine.config.attachments import AttachmentSettings, BlobSettings
from memmachine.config.retention import RetentionPolicy, RetentionSettings
from memmachine.config.sections import (
    BUNDLED_EMBEDDING_MODEL,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_OPENAI_EMBEDDING_MODEL,
    DEFAULT_TORCH_EMBEDDING_MODEL,
    LLM_OFF_REASON,
    CompactionSettings,
    EmbeddingSettings,
    ExtractionSettings,
    JobSettings,
    LimitSettings,
    LlmSettings,
    MetricsSettings,
    RerankerSettings,
    RetrievalSettings,
    SafetySettings,
    SearchIndexSettings,
    TokenizerSettings,
    TracingSettings,
)
from memmachine.config.settings import Settings
from memmachine.config.sources import CONFIG_FILE_VARIABLE
from memmachine.config.urls import (
    Credentials,
    redact_url,
    resolve_credentials,
    url_address,
    with_password,
    without_userinfo,
)

__all__ = [
    "BUNDLED_EMBEDDING_MODEL",
    "CONFIG_FILE_VARIABLE",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_OPENAI_EMBEDDING_MODEL",
    "DEFAULT_TORCH_EMBEDDING_MODEL",
    "LLM_OFF_REASON",
    "AttachmentSettings",
    "BlobSettings",
    "CompactionSettings",
    "Credentials",
    "EmbeddingSettings",
    "ExtractionSettings",
    "JobSettings",
    "LimitSettings",
    "LlmSettings",
    "MetricsSettings",
    "RerankerSettings",
    "RetentionPolicy",
    "RetentionSettings",
    "RetrievalSettings",
    "SafetySettings",
    "SearchIndexSettings",
    "Settings",
    "TokenizerSettings",
    "TracingSettings",
    "redact_url",
    "resolve_credentials",
    "url_address",
    "with_password",
    "without_userinfo",
]
