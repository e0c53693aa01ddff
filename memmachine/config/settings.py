"""The top-level settings: stores, server, authentication, and every section."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    NoDecode,
    SettingsConfigDict,
)

from memmachine.config.attachments import AttachmentSettings, BlobSettings
from memmachine.config.retention import RetentionSettings
from memmachine.config.sections import (
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
from memmachine.config.sources import Section, split_list
from memmachine.config.urls import plain, redact_url, url_password

__all__ = ["Settings"]


class Settings(Section):
    """Top-level settings (``MEMMACHINE_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="MEMMACHINE_", env_nested_delimiter="__", extra="ignore"
    )

    data_dir: Path = Path(".memmachine")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    log_level: str = "INFO"
    #: ``json``: one JSON object per log line; ``text``: ``time level logger: message``;
    #: ``auto``: text when stderr is a terminal, else JSON.
    log_format: Literal["auto", "json", "text"] = "auto"

    #: Unset = embedded FalkorDB in the data dir; ``neo4j://``, ``neo4j+s://``,
    #: ``neo4j+ssc://``, ``bolt://``, ``bolt+s://`` = Neo4j (a path ``/name`` picks the
    #: database); ``falkordb://host:port`` or ``falkordb+unix:///path.sock`` = a FalkorDB
    #: server.
    episode_store_url: SecretStr | None = None
    #: Neo4j user (default ``neo4j`` when a password is set) or Redis ACL user of FalkorDB.
    episode_store_user: str | None = None
    episode_store_password: SecretStr | None = None
    #: Unset = SQLite in the data dir; ``postgresql+psycopg://user@host:5432/db`` (or
    #: ``postgresql://``) = PostgreSQL; ``sqlite+aiosqlite:///path.db`` = another SQLite file.
    profile_store_url: SecretStr | None = None
    profile_store_password: SecretStr | None = None
    #: Unset = the embedded server's Redis protocol; ``redis://`` / ``rediss://`` = Redis;
    #: ``redis+cluster://host:port`` (``rediss+cluster://``) = a Redis Cluster through any
    #: of its nodes (the client learns the others; a cluster has no ``/db``).
    working_store_url: SecretStr | None = None
    working_store_password: SecretStr | None = None
    #: Prefix of every key in the working-memory Redis, so deployments can share a server.
    working_key_prefix: str = "mm"
    #: Inactivity after which a session's working memory expires (refreshed by every write).
    working_ttl_seconds: int | None = Field(default=86_400, ge=1)
    #: Name of the graph holding episodes.
    graph_name: str = "memmachine"
    #: How long a command to the episode store on FalkorDB or Neo4j, the working store on
    #: Redis or a store on PostgreSQL (a whole transaction) may wait for its answer (on
    #: Neo4j also the server's transaction timeout). A write that gets none is reported as
    #: "outcome unknown" (HTTP 504) and never resent by the client.
    store_timeout_seconds: float = Field(default=10.0, gt=0)
    #: How long the answer to a write sent with an ``Idempotency-Key`` is kept: a retry
    #: with the same key within this time gets that answer again, nothing applied twice.
    idempotency_ttl_seconds: int = Field(default=86_400, ge=60)
    #: After a user or session is forgotten, the files that still hold deleted bytes (the
    #: append-only file and snapshot of the FalkorDB / Redis servers, SQLite's write-ahead
    #: log, PostgreSQL's dead rows) are compacted within this many seconds; 0 = at once,
    #: inside the forget request.
    forget_compaction_seconds: float = Field(default=60.0, ge=0, le=86_400)

    #: ``key=tenant`` pairs, comma separated. When set, every /v1 request needs
    #: ``Authorization: Bearer <key>`` and is confined to that key's tenant.
    api_keys: SecretStr | None = None
    #: ``auto``: API keys are required once any key exists (in the key store, or
    #: ``api_keys`` / ``admin_key`` set); with none, the server is open on a loopback address
    #: and ``memmachine serve`` refuses to start on any other. ``on``: a key is always
    #: required. ``off``: open, every caller is tenant ``default`` (logged at every start).
    auth: Literal["auto", "on", "off"] = "auto"
    #: A key that may only manage API keys (``/v1/admin/keys``), for every tenant.
    admin_key: SecretStr | None = None
    #: Requests per minute per API key when the key sets no limit of its own; 0 = unlimited.
    rate_limit_per_minute: int = Field(default=0, ge=0)
    #: How often a running server re-reads the key store (keys created or revoked by the
    #: ``memmachine keys`` command take effect within this time).
    key_refresh_seconds: float = Field(default=2.0, gt=0)
    #: Host names (``Host`` header, port ignored) and page origins the server answers, comma
    #: separated or a JSON list; ``*`` = any. Unset: only loopback names (``localhost``,
    #: ``127.0.0.1``, ``[::1]``) while the server is bound to a loopback address and serves
    #: requests without a key, so a web page cannot reach it by DNS rebinding; any host
    #: once keys are required or on other addresses.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)

    #: How long startup keeps retrying a store that cannot be reached (all stores share the
    #: budget; 0 = one attempt each), and the exponential backoff between attempts.
    startup_timeout_seconds: float = Field(default=60.0, ge=0)
    startup_backoff_base_seconds: float = Field(default=0.5, gt=0)
    startup_backoff_max_seconds: float = Field(default=5.0, gt=0)

    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    reranker: RerankerSettings = Field(default_factory=RerankerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    search_index: SearchIndexSettings = Field(default_factory=SearchIndexSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    tokenizer: TokenizerSettings = Field(default_factory=TokenizerSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    attachments: AttachmentSettings = Field(default_factory=AttachmentSettings)
    blob: BlobSettings = Field(default_factory=BlobSettings)

    #: Custom memory types to serve (:mod:`memmachine.memory_types`), besides those of the
    #: ``memmachine.memory_types`` entry points: ``module:Class`` references, a JSON list or
    #: comma separated (``MEMMACHINE_MEMORY_TYPES=my_pkg.types:ReadingList``).
    memory_types: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Where custom types keep their records: ``sqlite`` (``<data dir>/memory_types.db``) or
    #: ``redis`` (the working store's server, embedded or ``MEMMACHINE_WORKING_STORE_URL``).
    memory_types_store: Literal["sqlite", "redis"] = "sqlite"

    @field_validator("memory_types", "allowed_hosts", mode="before")
    @classmethod
    def _split_lists(cls, value: Any) -> Any:
        return split_list(value)

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

    def describe(self) -> dict[str, str]:
        """Where each store lives, passwords masked: safe for logs and error messages."""
        data_dir = self.data_dir.expanduser().resolve()
        embedded = f"embedded FalkorDB in {data_dir / 'falkordb'}"
        episode = plain(self.episode_store_url)
        profile = plain(self.profile_store_url)
        working = plain(self.working_store_url)
        return {
            "episodic": redact_url(episode) if episode else embedded,
            "profile": redact_url(profile) if profile else f"SQLite {data_dir / 'profile.db'}",
            "working": redact_url(working) if working else embedded,
        }

    def secrets(self) -> list[str]:
        """Every password this configuration knows, to scrub from messages."""
        found: list[str] = []
        urls = (self.episode_store_url, self.profile_store_url, self.working_store_url)
        for url in (*urls, self.jobs.url):
            text = plain(url)
            if text:
                password = url_password(text)
                if password:
                    found.append(password)
        for secret in (
            self.episode_store_password,
            self.profile_store_password,
            self.working_store_password,
            self.api_keys,
            self.admin_key,
            self.embedding.api_key,
            self.llm.api_key,
            self.jobs.password,
            self.metrics.key,
            self.blob.secret_access_key,
        ):
            text = plain(secret)
            if text:
                found.append(text)
        return found
