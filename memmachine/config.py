"""Settings: environment variables (``MEMMACHINE_*``) read through pydantic-settings.

Nothing here opens a connection; :mod:`memmachine.bootstrap` turns settings into adapters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["EmbeddingSettings", "LimitSettings", "RetrievalSettings", "Settings"]

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"


class EmbeddingSettings(BaseSettings):
    """How episodes and queries are embedded (``MEMMACHINE_EMBEDDING_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_EMBEDDING_", extra="ignore")

    #: ``local`` = ONNX model on this machine, ``openai`` = any OpenAI-compatible endpoint,
    #: ``none`` = lexical-only search.
    provider: Literal["local", "openai", "none"] = "local"
    #: local: a model directory (``onnx/model.onnx`` + ``tokenizer.json``) or a hub model name
    #: downloaded once into ``cache_dir``. openai: the model name sent to the endpoint.
    model: str = DEFAULT_EMBEDDING_MODEL
    onnx_file: str = "onnx/model.onnx"
    max_tokens: int = Field(default=256, ge=8, le=8192)
    batch_size: int = Field(default=64, ge=1, le=2048)
    threads: int = Field(default=0, ge=0, description="onnxruntime intra-op threads; 0 = auto")
    hub_url: str = "https://huggingface.co"
    hub_timeout_seconds: float = Field(default=10.0, gt=0)
    cache_dir: Path | None = None
    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    dimensions: int | None = Field(default=None, ge=1)
    request_timeout_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _openai_default_model(self) -> EmbeddingSettings:
        """The local default model name means nothing to an OpenAI endpoint."""
        if self.provider == "openai" and self.model == DEFAULT_EMBEDDING_MODEL:
            self.model = DEFAULT_OPENAI_EMBEDDING_MODEL
        return self


class LimitSettings(BaseSettings):
    """Input limits (``MEMMACHINE_LIMIT_*``); going over one is a 413."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_LIMIT_", extra="ignore")

    max_message_chars: int = Field(default=32_000, ge=1)
    max_batch_messages: int = Field(default=500, ge=1)
    max_facts_per_request: int = Field(default=500, ge=1)
    max_fact_chars: int = Field(default=4_000, ge=1)
    max_state_bytes: int = Field(default=256_000, ge=1)
    max_top_k: int = Field(default=100, ge=1)
    max_request_bytes: int = Field(default=8_000_000, ge=1024)


class RetrievalSettings(BaseSettings):
    """How hybrid search fuses its signals (``MEMMACHINE_RETRIEVAL_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_RETRIEVAL_", extra="ignore")

    #: The k of reciprocal-rank fusion: higher flattens the advantage of the top ranks.
    rrf_k: int = Field(default=10, ge=1)
    vector_weight: float = Field(default=1.0, ge=0)
    fulltext_weight: float = Field(default=1.0, ge=0)
    #: Each signal contributes max(min_candidates, top_k * candidates_per_result) candidates.
    candidates_per_result: int = Field(default=3, ge=1)
    min_candidates: int = Field(default=30, ge=1)


class Settings(BaseSettings):
    """Top-level settings (``MEMMACHINE_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="MEMMACHINE_", env_nested_delimiter="__", extra="ignore"
    )

    data_dir: Path = Path(".memmachine")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    log_level: str = "INFO"

    #: Unset = embedded FalkorDB in the data dir; ``falkordb://host:port`` or
    #: ``falkordb+unix:///path.sock`` = a FalkorDB server.
    episode_store_url: SecretStr | None = None
    #: Unset = SQLite in the data dir; otherwise an SQLAlchemy async URL.
    profile_store_url: SecretStr | None = None
    #: Unset = the embedded server's Redis protocol; ``redis://`` / ``rediss://`` = Redis.
    working_store_url: SecretStr | None = None
    #: Prefix of every key in the working-memory Redis, so deployments can share a server.
    working_key_prefix: str = "mm"
    #: Inactivity after which a session's working memory expires (refreshed by every write).
    working_ttl_seconds: int | None = Field(default=86_400, ge=1)
    #: Name of the graph holding episodes.
    graph_name: str = "memmachine"

    #: ``key=tenant`` pairs, comma separated. When set, every /v1 request needs
    #: ``Authorization: Bearer <key>`` and is confined to that key's tenant.
    api_keys: SecretStr | None = None

    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)

    def api_key_tenants(self) -> dict[str, str]:
        """Parse ``api_keys`` into {key: tenant}; empty when auth is off."""
        if self.api_keys is None:
            return {}
        out: dict[str, str] = {}
        for item in self.api_keys.get_secret_value().split(","):
            item = item.strip()
            if not item:
                continue
            key, _, tenant = item.partition("=")
            out[key.strip()] = tenant.strip() or "default"
        return out
