"""Ports: the storage and model roles the manager depends on, with their contracts.

Every adapter of a port passes the shared contract suite in ``tests/contract/``. The contracts
below are what that suite checks; an adapter that needs to deviate must change the contract
here first.

Common rules for every store:

* Lifecycle: ``start()`` connects and creates what the store needs (idempotently); ``close()``
  releases everything and may be called twice. Stores are async context managers through
  :class:`Lifecycle`.
* Scope: every method takes a :class:`~memmachine.models.Scope`. ``tenant``, ``org_id``,
  ``project_id`` and ``user_id`` always match exactly; ``agent_id``, ``session_id`` and
  ``group_id`` narrow the match when set. Nothing outside the scope is ever read, changed or
  counted.
* Errors: driver exceptions never escape; a failing backend raises
  :class:`~memmachine.errors.StoreError` (or ``StoreUnavailableError``) naming the store.
* ``health()`` never raises: it reports ``status="down"`` with a detail instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

from memmachine.auth import ApiKey, StoredKey
from memmachine.models import (
    Episode,
    EpisodeDetachment,
    EpisodeRecord,
    Fact,
    FactRecord,
    FactVersion,
    IndexEntry,
    IndexState,
    Scope,
    StoreHealth,
    WorkingMemory,
    WorkingMessage,
)

__all__ = [
    "ChatMessage",
    "Embedder",
    "EpisodeStore",
    "Job",
    "JobQueue",
    "JobStatus",
    "KeyStore",
    "LanguageModel",
    "Lifecycle",
    "ProfileStore",
    "Reranker",
    "SpanEmbedder",
    "SpanSet",
    "WorkingMemoryStore",
]


class Lifecycle:
    """Mixin giving ``async with`` to anything with ``start()`` and ``close()``."""

    async def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


@runtime_checkable
class EpisodeStore(Protocol):
    """Long-term episodic memory: episodes in a graph, linked by session and order.

    Contract:

    * ``add_episodes(scope, records)`` stores the records, in order, at the end of the session
      ``scope.session_id`` (required; ``InvalidInputError`` without it). All or nothing: on
      failure no record of the batch is stored. Each episode gets ``sequence`` one higher than
      the session's last and is linked to the previous episode of the session. Ids are given
      by the caller; an id that already exists raises ``ConflictError`` and stores nothing.
      Returns the stored episodes in input order. The first episode of a session has
      sequence 1; numbering continues from the session's current last episode.
      Ids are unique within the user: the same id under another user is another episode
      and does not conflict (a conflict must not reveal what another scope holds). A
      repeated id inside the batch raises ``ConflictError``; a vector of the wrong size,
      non-finite or all zeros raises ``InvalidInputError``; in both cases nothing is stored.
    * ``get_episode`` returns the episode only when it lies inside ``scope``, else ``None``.
    * ``list_episodes`` returns episodes in scope ordered by (timestamp, sequence), oldest
      first, or newest first with ``newest_first``; ``limit``/``offset`` page through them.
    * ``count_episodes`` counts episodes in scope.
    * ``delete_episode`` removes one episode in scope and relinks its neighbours; returns
      whether something was deleted.
    * ``delete_episodes(scope)`` removes every episode in scope (a whole user, or one session
      when ``scope.session_id`` is set) with its session nodes; returns how many episodes.
    * ``vector_search`` returns up to ``k`` episodes in scope with the highest cosine
      similarity (``1.0`` = same direction), best first, as ``(episode, similarity)``. Exact
      within scope: an episode in scope is never lost because other scopes crowd an index.
      Returns ``[]`` when the store was started without vectors. An episode stored with
      ``derivative_embeddings`` (the vectors of its sentences and context window) scores
      the best of its own vector's similarity and each derivative's similarity times its
      weight (``derivative_weights``, 1.0 when not given), unless ``derivatives=False`` is
      passed; each episode appears at most once. Derivatives are part of their episode:
      they are stored with it (all or nothing, same vector checks, field
      ``records.<i>.derivative_embeddings``; weights must be one per derivative, finite and
      positive, field ``records.<i>.derivative_weights``), deleted with it, never returned
      on their own and never reached from another scope.
    * ``fulltext_search`` returns up to ``k`` episodes in scope matching any term of
      ``query`` (case-insensitive, punctuation ignored), best first, as ``(episode, score)``
      with higher = better. A query with no usable term returns ``[]``; user text never
      breaks the query syntax.
    * ``neighbours(scope, episode_id, before, after)`` returns up to ``before`` episodes
      preceding and ``after`` following it in its session, in session order (the episode
      itself excluded), only ever episodes inside ``scope``; ``[]`` when the episode is not
      in scope.
    * ``adjacent(scope, episode_ids)`` maps each id of an episode inside ``scope`` to what
      ``neighbours(scope, id, before=1, after=1)`` returns for it (the nearest in-scope
      episode before and after it in its session, in session order); ids not in scope are
      left out. One round trip for all ids.
    * A lexical-only store (started without dimensions) may open a graph built with vectors;
      its new episodes carry none. A store started with other dimensions or another model
      than the graph was built with raises ``ConfigurationError``.
    * ``get_episodes(scope, ids)`` returns the in-scope episodes among ``ids``, in the order
      of ``ids``, each once; ids missing or outside the scope are left out. One round trip.

    What an in-process search index needs to stay in step with the store (always about the
    *user* of ``scope``: tenant, org, project, user; narrowing ids are ignored):

    * ``index_state(scope)`` returns the user's :class:`~memmachine.models.IndexState`.
      ``revision`` grows with every call that adds episodes and every delete call (even one
      that deleted nothing), within the call's own transaction; ``deletions`` grows by one
      with every call that deleted at least one episode; ``episodes`` counts the user's
      episodes. Reading a state ``S`` guarantees that every episode added at a revision up
      to ``S.revision`` is visible to the next read.
    * ``index_entries(scope, since=None)`` yields the user's episodes as
      :class:`~memmachine.models.IndexEntry` batches: all of them, or with ``since`` only
      those added at a revision above ``since``. Each episode appears once; entries carry
      the stored terms and vectors (derivatives included, with their weights) and the
      episode itself, equal to what ``get_episodes`` returns for it.
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...

    async def add_episodes(
        self, scope: Scope, records: Sequence[EpisodeRecord]
    ) -> list[Episode]: ...
    async def get_episode(self, scope: Scope, episode_id: str) -> Episode | None: ...
    async def list_episodes(
        self, scope: Scope, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> list[Episode]: ...
    async def count_episodes(self, scope: Scope) -> int: ...
    async def delete_episode(self, scope: Scope, episode_id: str) -> bool: ...
    async def delete_episodes(self, scope: Scope) -> int: ...
    async def vector_search(
        self, scope: Scope, embedding: Sequence[float], k: int, *, derivatives: bool = True
    ) -> list[tuple[Episode, float]]: ...
    async def fulltext_search(
        self, scope: Scope, query: str, k: int
    ) -> list[tuple[Episode, float]]: ...
    async def neighbours(
        self, scope: Scope, episode_id: str, *, before: int, after: int
    ) -> list[Episode]: ...
    async def adjacent(
        self, scope: Scope, episode_ids: Sequence[str]
    ) -> dict[str, list[Episode]]: ...
    async def get_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> list[Episode]: ...
    async def index_state(self, scope: Scope) -> IndexState: ...
    def index_entries(
        self, scope: Scope, *, since: int | None = None
    ) -> AsyncIterator[list[IndexEntry]]: ...


@runtime_checkable
class ProfileStore(Protocol):
    """Profile memory: distilled facts ``{tag, feature, value}`` about a user.

    Contract:

    * ``upsert_facts(scope, records)``: a user holds at most one fact per (tag, feature)
      within (tenant, org, project, user); writing an existing (tag, feature) replaces value,
      confidence, source and metadata, keeps ``id`` and ``created_at`` and moves
      ``updated_at``. All or nothing. Returns the stored facts in input order. ``agent_id``
      and ``group_id`` of the scope are recorded on new facts and kept on updates; an update
      also replaces ``source_session_id`` and the embedding. The same (tag, feature) twice in
      one batch: the last record wins and both positions return the final fact.
    * History: an upsert that gives an existing (tag, feature) a *different* value first
      records the old version (value, confidence, source, ``source_episode_ids``,
      ``valid_from``, ``valid_to`` = now, reason ``"superseded"``) and starts a new
      ``valid_from``; the same value again is a corroboration: no history, ``updated_at``
      moves and the record's ``source_episode_ids`` are added to the fact's. Current facts
      have ``valid_to`` ``None``.
    * ``invalidate_fact(scope, fact_id, reason)`` closes a fact inside the user's scope: its
      version is recorded with ``valid_to`` = now and ``reason``, and it no longer appears in
      ``get_fact`` / ``list_facts`` / ``search_facts``. Returns whether it existed.
    * ``apply_facts(scope, records, invalidate=ids, reason=...)`` invalidates the facts
      ``ids`` (unknown ids are skipped) and then upserts ``records``, all or nothing in one
      transaction; returns the stored facts in input order.
    * ``detach_episodes(scope, episode_ids)`` is what deleting episodes does to the user's
      facts, in one transaction: the ids leave every fact's and every closed version's
      ``source_episode_ids``; a closed version left with none is erased; a current fact
      left with none (it rested only on those episodes) goes back to its newest closed
      version that still has source episodes (value, confidence, source, ids and
      ``valid_from`` of that version, which leaves the history), or is deleted when there
      is none. Facts that never had source episodes are untouched. Returns an
      ``EpisodeDetachment``.
    * ``fact_history(scope, tag, feature)`` returns the closed versions of the user's
      (tag, feature), oldest first. ``delete_fact`` / ``delete_facts`` also erase the history
      of what they delete.
    * For reads and deletes, ``agent_id``/``group_id`` narrow to facts recorded with them and
      ``session_id`` to facts whose ``source_session_id`` is that session (pass
      ``scope.user_scope()`` for all of a user's facts).
    * ``get_fact`` / ``delete_fact`` act on one fact by id only inside the user's scope.
    * ``list_facts`` returns the user's facts ordered by (tag, feature), optionally only one
      tag and/or feature; ``limit``/``offset`` page.
    * ``delete_facts(scope, tag=None, feature=None)`` deletes the matching facts of the user;
      when ``scope.session_id`` is set only facts whose ``source_session_id`` is that session.
      Returns how many.
    * ``search_facts(scope, query, embedding, k)`` ranks the user's facts against the query
      text (terms found in tag, feature or value) and, when both the query embedding and the
      fact's embedding exist, by cosine similarity; best first, score higher = better, only
      facts with a positive score.
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...

    async def upsert_facts(self, scope: Scope, records: Sequence[FactRecord]) -> list[Fact]: ...
    async def get_fact(self, scope: Scope, fact_id: str) -> Fact | None: ...
    async def list_facts(
        self,
        scope: Scope,
        *,
        tag: str | None = None,
        feature: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[Fact]: ...
    async def delete_fact(self, scope: Scope, fact_id: str) -> bool: ...
    async def delete_facts(
        self, scope: Scope, *, tag: str | None = None, feature: str | None = None
    ) -> int: ...
    async def search_facts(
        self, scope: Scope, query: str, embedding: Sequence[float] | None, k: int
    ) -> list[tuple[Fact, float]]: ...
    async def invalidate_fact(self, scope: Scope, fact_id: str, reason: str) -> bool: ...
    async def apply_facts(
        self,
        scope: Scope,
        records: Sequence[FactRecord],
        *,
        invalidate: Sequence[str],
        reason: str,
    ) -> list[Fact]: ...
    async def fact_history(self, scope: Scope, tag: str, feature: str) -> list[FactVersion]: ...
    async def detach_episodes(
        self, scope: Scope, episode_ids: Sequence[str]
    ) -> EpisodeDetachment: ...


@runtime_checkable
class WorkingMemoryStore(Protocol):
    """Working memory: one session's messages, JSON state and summary, with a TTL.

    Contract (``scope.session_id`` is required everywhere except ``delete_user``; a session
    is identified by tenant, org, project, user and session — ``agent_id`` and ``group_id``
    do not split it):

    * ``get(scope, last_n=None, offset=0, limit=None)`` returns the session or ``None`` when
      it does not exist (never written, deleted or expired). Messages are always oldest
      first. With ``last_n`` only the newest ``last_n`` are returned; otherwise the page
      ``messages[offset:offset + limit]`` (``limit=None`` = to the end). Giving ``last_n``
      with ``offset``/``limit`` is an ``InvalidInputError``. ``message_count`` is always the
      full count and ``first_index`` the position of the first returned message.
    * Every write creates the session when missing, increments ``version`` by exactly one,
      sets ``updated_at`` and (re)starts the TTL of all the session's keys at ``ttl_seconds``
      (``None`` = never expire).
    * ``append(scope, messages, ttl_seconds)`` appends atomically (concurrent appends all land,
      none interleave inside one call) and needs no version.
    * ``put(scope, *, messages, state, summary, expected_version, ttl_seconds)`` replaces
      whatever of messages/state/summary is not ``None``. With ``expected_version`` the write
      happens only when the current version equals it (0 = the session must not exist);
      otherwise nothing changes and ``ConflictError`` carries the current version.
    * ``delete(scope)`` removes the session; ``delete_user(scope)`` removes every session of
      the user. Both return how many sessions were removed.
    * A write returns the session after it (version, message_count, state, summary, ttl)
      with an empty ``messages`` list: read messages back with ``get``.
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...

    async def get(
        self, scope: Scope, *, last_n: int | None = None, offset: int = 0, limit: int | None = None
    ) -> WorkingMemory | None: ...
    async def append(
        self, scope: Scope, messages: Sequence[WorkingMessage], *, ttl_seconds: int | None
    ) -> WorkingMemory: ...
    async def put(
        self,
        scope: Scope,
        *,
        messages: Sequence[WorkingMessage] | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
        ttl_seconds: int | None,
    ) -> WorkingMemory: ...
    async def delete(self, scope: Scope) -> int: ...
    async def delete_user(self, scope: Scope) -> int: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors.

    Contract: ``start()`` loads the model or opens the connection (a remote embedder learns
    its ``dimensions`` here); ``dimensions`` is valid after it. ``embed(texts)`` returns one
    vector of length ``dimensions`` per text, in order, each L2-normalised; an empty input
    returns ``[]``. Batching is the embedder's business.
    Failures raise ``StoreError`` naming the embedder (it is a backend like any other).
    ``model`` identifies the model, so a store can refuse vectors from a different one.
    """

    name: str
    model: str
    dimensions: int

    async def start(self) -> None: ...
    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
    async def close(self) -> None: ...


#: Character ranges ``(start, end)`` of one text whose tokens are pooled into one vector.
SpanSet = Sequence[tuple[int, int]]


@runtime_checkable
class SpanEmbedder(Embedder, Protocol):
    """An embedder that can pool several vectors out of one run of its model over a text,
    so that a message read after the messages before it yields its own vector and its
    sentences' vectors, each informed by that context, for the price of one run.

    Contract, besides :class:`Embedder`'s (all valid after ``start()``): ``pools_spans``
    says whether this model can (a model that pools inside itself cannot; then the other
    two methods raise ``StoreError``). ``max_tokens`` is the most tokens the model reads of
    one text. ``count_tokens(texts)`` returns each text's token count for the model,
    special tokens included, however long the text. ``embed_spans(texts, spans)`` runs the
    model once per text and returns, per text, one vector per span set of ``spans[i]``, in
    order: the mean of the output states of the text's special tokens and of every token
    lying wholly inside one of the set's character ranges, L2-normalised. A set that covers
    the whole of a text that fits gives what ``embed`` gives. A text over ``max_tokens``
    tokens loses its *start* (its end is kept); a set left with none of its own tokens is
    ``None``. ``texts`` and ``spans`` of different lengths raise ``InvalidInputError``
    naming ``spans``.
    """

    pools_spans: bool
    max_tokens: int

    async def count_tokens(self, texts: Sequence[str]) -> list[int]: ...
    async def embed_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[SpanSet]]
    ) -> list[list[list[float] | None]]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores how relevant each text is to a query, reading both together (a cross-encoder).

    Contract: ``start()`` loads the model (idempotent: a started reranker stays as it is) and
    raises ``ConfigurationError`` when the model or its runtime cannot be had; ``close()``
    releases it and may be called twice. ``score(query, texts)`` returns one finite float per
    text, in input order, higher = more relevant to ``query``; the scale is the model's own
    and only the order of the scores within one call means something. An empty ``texts``
    returns ``[]``. Batching is the reranker's business. Failures while scoring (including a
    call before ``start()`` or after ``close()``) raise ``StoreError`` with
    ``store="reranker"``. ``model`` identifies the model; ``name`` is ``"reranker"``.
    """

    name: str
    model: str

    async def start(self) -> None: ...
    async def score(self, query: str, texts: Sequence[str]) -> list[float]: ...
    async def close(self) -> None: ...


# --------------------------------------------------------------------------- language model

ChatMessage = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

ResultT = TypeVar("ResultT", bound=BaseModel)


@runtime_checkable
class LanguageModel(Protocol):
    """A chat model behind any OpenAI-compatible endpoint (off the hot path only).

    Contract:

    * ``start()`` opens the client (no request is sent); ``close()`` may be called twice.
    * ``complete(messages, max_tokens)`` returns the assistant's text.
    * ``complete_structured(messages, result_type)`` returns a validated ``result_type``.
      The reply is parsed as JSON (a fenced or surrounded JSON object is extracted, small
      syntax slips are repaired); a reply that still does not validate is sent back to the
      model with the validation error, up to ``retries`` more times; then
      ``ModelOutputError`` (carrying the last raw reply) is raised.
    * Transport failures (unreachable, 5xx, 429 after bounded backoff) raise
      ``StoreError(store="llm")`` without the API key in the message.
    """

    name: str
    model: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None
    ) -> str: ...
    async def complete_structured(
        self,
        messages: Sequence[ChatMessage],
        result_type: type[ResultT],
        *,
        retries: int = 2,
    ) -> ResultT: ...


# --------------------------------------------------------------------------- jobs

JobStatus = Literal["queued", "running", "done", "dead"]


class Job(BaseModel):
    """A unit of background work (extraction, compaction...) and its state."""

    id: str
    kind: str
    #: Who the work is for; API reads of jobs are confined to it like any other memory.
    scope: Scope
    payload: dict[str, Any] = Field(default_factory=dict)
    #: Enqueueing the same key again returns the existing job instead of adding one.
    idempotency_key: str
    status: JobStatus = "queued"
    attempts: int = 0
    max_attempts: int = 5
    last_error: str | None = None
    created_at: datetime
    updated_at: datetime
    #: A queued job is not claimed before this time (retry backoff).
    available_at: datetime


@runtime_checkable
class JobQueue(Protocol):
    """A durable queue of background jobs with retries and a dead-letter list.

    Contract:

    * ``enqueue(scope, kind, payload, idempotency_key, max_attempts, delay_seconds)`` stores
      a queued job and returns it; a key already enqueued (in any status) returns that job
      unchanged. With ``delay_seconds`` > 0 the job is not claimable before that much time
      has passed (``available_at`` = now + delay).
    * ``claim(worker, kinds, lease_seconds)`` hands one available queued job (oldest first,
      ``available_at`` passed) to ``worker`` as ``running``, with ``attempts`` + 1, or
      returns ``None``. A running job whose lease expired (its worker died) becomes
      claimable again: no job is lost when a worker crashes.
    * ``complete(job_id, worker)`` marks it ``done``; ``fail(job_id, worker, error)`` puts
      it back ``queued`` with exponential backoff and jitter, or ``dead`` after
      ``max_attempts``. Both are refused (``ConflictError``) when ``worker`` no longer holds
      the lease, so a job is never completed twice.
    * ``get(scope, job_id)`` returns the job only inside its user's scope; ``list_jobs``
      filters by status; ``replay(scope, job_id)`` requeues a dead job with attempts reset.
    * Retention: a done job may be removed after a retention time the adapter is
      configured with (then ``get``/``list_jobs`` no longer return it and its idempotency
      key is free again); queued and running jobs are never removed, and dead jobs stay
      until replayed or purged: ``purge_dead(scope, job_id=None)`` deletes that dead job
      of the user (``NotFoundError`` outside the user's scope, ``ConflictError`` when it
      is not dead), or every dead job of the user, and returns how many it deleted.
    * Jobs survive a restart of the process and of the backing store's server when it
      persists (the embedded server does).
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...

    async def enqueue(
        self,
        scope: Scope,
        kind: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str,
        max_attempts: int = 5,
        delay_seconds: float = 0.0,
    ) -> Job: ...
    async def claim(
        self, worker: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 60.0
    ) -> Job | None: ...
    async def complete(self, job_id: str, worker: str) -> Job: ...
    async def fail(self, job_id: str, worker: str, error: str) -> Job: ...
    async def get(self, scope: Scope, job_id: str) -> Job | None: ...
    async def list_jobs(
        self, scope: Scope, *, status: JobStatus | None = None, limit: int = 100
    ) -> list[Job]: ...
    async def replay(self, scope: Scope, job_id: str) -> Job: ...
    async def purge_dead(self, scope: Scope, job_id: str | None = None) -> int: ...


@runtime_checkable
class KeyStore(Protocol):
    """API keys (:class:`~memmachine.auth.ApiKey`) with the hash of their secret; never a key.

    Keys are looked up by id before anyone knows the caller's tenant, so these methods take
    a tenant (or nothing, for an operator's view of all tenants) instead of a Scope.

    Contract:

    * ``create(key, secret_hash)`` stores a new key and returns it; an id already stored
      raises ``ConflictError``. Only ``secret_hash`` is kept of the secret.
    * ``get(key_id)`` returns the :class:`~memmachine.auth.StoredKey` (revoked or not), or
      ``None`` for an unknown id.
    * ``list_keys(tenant)`` returns the tenant's keys, revoked ones included, oldest first;
      ``tenant=None`` returns every tenant's.
    * ``active_keys()`` returns every key not revoked, with its hash (what a server caches
      to check requests).
    * ``revoke(key_id, tenant)`` marks the key revoked and returns it; revoking it again
      keeps the first ``revoked_at``. An unknown id, or one of another tenant when ``tenant``
      is given, raises ``NotFoundError``.
    * ``any_active()`` is whether at least one key is not revoked.
    * Keys survive a restart; several processes (the server and the ``memmachine keys``
      command) may use one database at once.
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...

    async def create(self, key: ApiKey, secret_hash: str) -> ApiKey: ...
    async def get(self, key_id: str) -> StoredKey | None: ...
    async def list_keys(self, tenant: str | None = None) -> list[ApiKey]: ...
    async def active_keys(self) -> list[StoredKey]: ...
    async def revoke(self, key_id: str, tenant: str | None = None) -> ApiKey: ...
    async def any_active(self) -> bool: ...
