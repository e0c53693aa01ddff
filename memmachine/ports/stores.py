"""The store ports: episodic, profile and working memory, and API keys (see
:mod:`memmachine.ports` for the rules every store follows)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from memmachine.auth import ApiKey, StoredKey
from memmachine.models import (
    Episode,
    EpisodeDetachment,
    EpisodeRecord,
    Fact,
    FactRecord,
    FactTimes,
    FactVersion,
    IndexEntry,
    IndexState,
    ProjectScope,
    Scope,
    SessionActivity,
    StoreHealth,
    TimeBucket,
    UserActivity,
    WorkingMemory,
    WorkingMessage,
)

__all__ = [
    "EpisodeStore",
    "KeyStore",
    "Lifecycle",
    "ProfileStore",
    "RateLimiter",
    "WorkingMemoryStore",
    "page_of_projects",
]


def page_of_projects(
    found: Iterable[tuple[str, str, str]], after: ProjectScope | None, limit: int
) -> list[ProjectScope]:
    """The page ``list_projects`` answers from the ``(tenant, org_id, project_id)`` a store
    found (duplicates allowed): code-point order, above ``after``, at most ``limit``."""
    start = None if after is None else (after.tenant, after.org_id, after.project_id)
    ids = sorted({ids for ids in found if start is None or ids > start})
    return [ProjectScope(tenant=t, org_id=o, project_id=p) for t, o, p in ids[: max(limit, 0)]]


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
      The id check is part of the write: of concurrent adds of the same id (from any number
      of store instances, before or after a restart) exactly one stores it and the others
      raise ``ConflictError``, until the episode is deleted and the id is free again. The
      episodic service relies on this to store a message sent twice once: it derives a
      timestamped message's id from its scope, role, producer, timestamp, content and
      metadata (:mod:`memmachine.memory.repeats`).
    * ``get_episode`` returns the episode only when it lies inside ``scope``, else ``None``.
    * ``list_episodes`` returns episodes in scope ordered by (timestamp, sequence), oldest
      first, or newest first with ``newest_first``; ``limit``/``offset`` page through them.
    * ``count_episodes`` counts episodes in scope.
    * ``delete_episode`` removes one episode in scope and relinks its neighbours; returns
      whether something was deleted. With ``stored_at`` only the episode stored at that
      instant (its ``created_at``): one stored anew under the same id since the caller read
      it is kept and ``False`` returned, checked inside the delete (the retention sweep and
      the removal of an expired repeat rely on it not to remove a message just stored).
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
    * ``list_users`` (see :mod:`memmachine.ports`) lists the users holding at least one
      episode, with ``episodes`` (how many), ``sessions`` (sessions holding episodes) and
      ``last_active`` (when an episode was last added).
    * ``list_sessions(scope, limit, offset)`` returns the sessions of the scope's user that
      hold episodes (narrowing ids of the scope are ignored) as
      :class:`~memmachine.models.SessionActivity`, the one an episode was most recently
      added to first (ties by session id); ``limit``/``offset`` page.
    * ``episode_timeline(scope, bucket_seconds)`` counts the in-scope episodes by timestamp
      in buckets of ``bucket_seconds`` (>= 1, else ``InvalidInputError``) aligned on the
      Unix epoch: one :class:`~memmachine.models.TimeBucket` per bucket holding at least
      one episode, oldest first.

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
    async def delete_episode(
        self, scope: Scope, episode_id: str, *, stored_at: datetime | None = None
    ) -> bool: ...
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
    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]: ...
    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]: ...
    async def list_sessions(
        self, scope: Scope, *, limit: int = 100, offset: int = 0
    ) -> list[SessionActivity]: ...
    async def episode_timeline(
        self, scope: Scope, *, bucket_seconds: int = 86_400
    ) -> list[TimeBucket]: ...
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
    * Concurrent writes of one (tag, feature) take turns: every value an upsert returned is
      afterwards the current value or a closed version, exactly once, in the order the
      writes committed, each version closing when the next opens (no lost update).
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
    * ``mark_sources_expired(scope, episode_ids)`` is what the retention sweep does to the
      user's facts when it removes episodes: each of ``episode_ids`` in a fact's or a closed
      version's ``source_episode_ids`` is replaced by one
      :data:`~memmachine.models.EXPIRED_SOURCE` marker (the list keeps its other ids, then
      the marker, at most once); nothing else changes (no history, ``updated_at`` kept).
      Returns how many facts and versions changed. One transaction.
    * A closed version carries ``expires_at``: the expiry in the fact's
      ``metadata["expires_at"]`` (ISO 8601) when it was closed, ``None`` without one.
      ``delete_expired_versions(scope, now)`` erases the user's closed versions with
      ``expires_at`` at or before ``now``; returns how many.
    * ``fact_history(scope, tag, feature)`` returns the closed versions of the user's
      (tag, feature), oldest first. ``list_fact_versions(scope)`` returns every closed
      version of the user (also of features with no current fact, e.g. invalidated ones),
      ordered by (tag, feature), then oldest first. ``delete_fact`` / ``delete_facts`` also
      erase the history of what they delete.
    * ``restore_fact_times(scope, tag, feature, current, versions)`` puts back the times
      another store recorded for the user's (tag, feature), in one transaction: the current
      fact's ``created_at`` / ``updated_at`` / ``valid_from`` from ``current`` (and its id,
      when given and no other fact has it), the closed versions' ``valid_from`` /
      ``valid_to`` / ``recorded_at`` (and ``fact_id``) from ``versions``, oldest first. Only
      fields that are set change; nothing changes, and it returns ``False``, unless the
      store holds exactly ``len(versions)`` closed versions and a current fact exactly when
      ``current`` is given.
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
    * ``list_users`` (see :mod:`memmachine.ports`) lists the users holding a current fact or
      a closed version, with ``facts`` (current facts) and ``last_active`` (the newest
      ``updated_at`` of a current fact or ``recorded_at`` of a closed version).
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
    async def list_fact_versions(self, scope: Scope) -> list[FactVersion]: ...
    async def restore_fact_times(
        self,
        scope: Scope,
        tag: str,
        feature: str,
        current: FactTimes | None,
        versions: Sequence[FactTimes],
    ) -> bool: ...
    async def detach_episodes(
        self, scope: Scope, episode_ids: Sequence[str]
    ) -> EpisodeDetachment: ...
    async def mark_sources_expired(self, scope: Scope, episode_ids: Sequence[str]) -> int: ...
    async def delete_expired_versions(self, scope: Scope, now: datetime) -> int: ...
    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]: ...
    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]: ...


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
    * ``list_sessions(scope)`` returns every existing session of the user (narrowing ids
      ignored) as it would be read with ``last_n=0`` (no messages, full counts), most
      recently written first (ties by session id).
    * ``list_users`` (see :mod:`memmachine.ports`) lists the users with at least one existing
      session, with ``working_sessions`` (how many) and ``last_active`` (the newest
      ``updated_at`` among them). A session that expired or was deleted is not counted.
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
    async def list_sessions(self, scope: Scope) -> list[WorkingMemory]: ...
    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]: ...
    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]: ...


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


@runtime_checkable
class RateLimiter(Protocol):
    """Requests per minute per API key: a token bucket per key id.

    Contract:

    * ``check(key_id, per_minute)`` spends one request of the key's bucket or raises
      :class:`~memmachine.errors.RateLimitedError` with ``retry_after`` > 0 (seconds until
      a request is available again), spending nothing. ``per_minute`` <= 0 is unlimited and
      records nothing. A bucket holds at most ``per_minute`` requests (the burst), starts
      full and gains one request every ``60 / per_minute`` seconds; a key checked with
      another limit than before starts from a full bucket of the new limit.
    * ``forget(key_id)`` drops the key's bucket (a revoked key).
    * Buckets of different keys are independent. Every process that uses the same backing
      store shares each key's bucket (an in-process limiter is one process's own).
    * A backend that fails raises ``StoreError`` naming the store.
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def check(self, key_id: str, per_minute: int) -> None: ...
    async def forget(self, key_id: str) -> None: ...
