"""The :class:`~memmachine.ports.EpisodeStore` behaviour for Cypher graph engines, written once.

Graph model, sequence numbering, ``NEXT`` links, BM25 in the query, exact in-scope cosine
and the embedding-settings check live here, over a
:class:`~memmachine.adapters.cypher.cypher_dialect.CypherDialect`. An engine's adapter subclasses
:class:`CypherEpisodeStore` and supplies the connection: ``start``/``close``/``health``,
``_run`` (one parameterised query, driver errors mapped to the project's errors) and its
schema.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.adapters.cypher.cypher_dialect import (
    CypherDialect,
    joined_terms,
    scope_predicate,
)
from memmachine.errors import ConfigurationError, ConflictError, InvalidInputError, StoreError
from memmachine.indexing.terms import (
    ANALYSER_VERSION,
    BM25_B,
    BM25_K1,
    document_terms,
    query_terms,
)
from memmachine.models import (
    Episode,
    EpisodeRecord,
    IndexEntry,
    IndexState,
    ProjectScope,
    Scope,
    SessionActivity,
    TimeBucket,
    UserActivity,
    checked_vector,
    utc_now,
)
from memmachine.ports import Lifecycle, page_of_projects

__all__ = ["FULLTEXT_INDEX", "CypherEpisodeStore"]


_STORE = "episodic"
#: 2: ``search_terms`` from the Snowball analyser (``terms.ANALYSER_VERSION`` 2); a graph
#: of schema 1 has its terms re-analysed on start (:meth:`CypherEpisodeStore._reindex_terms`).
#: 3: every user has a ``UserLedger`` (revision, deletions, episode count); a graph of an
#: earlier schema gets them on start (:meth:`CypherEpisodeStore._build_ledgers`).
#: 4: ``search_terms`` from the analyser of every language (``terms.ANALYSER_VERSION`` 3): a
#: graph of an earlier schema has its terms re-analysed on start.
_SCHEMA_VERSION = 4
_REINDEX_BATCH = 500
_META_KEY = "episode_store"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

#: Episodes per :meth:`CypherEpisodeStore.index_entries` batch.
_ENTRY_BATCH = 2000
#: Batches of at least this many rows are turned into entries in a worker thread.
_PARSE_IN_THREAD = 200
#: What :meth:`CypherEpisodeStore.index_entries` reads of an episode ``e``, in this order,
#: before the episode's own columns (:func:`_columns`).
_ENTRY_COLUMNS = (
    "e.id, e.session_id, e.agent_id, e.group_id, e.sequence, e.timestamp, "
    "coalesce(e.revision, 0), e.search_terms, e.embedding"
)
_ENTRY_COLUMN_COUNT = 9

#: Name of the full-text index over ``Episode.search_terms`` (where the engine names it).
FULLTEXT_INDEX = "episode_terms"

#: Episode properties returned by every read, in this order (see :func:`_episode_from_row`).
_EPISODE_FIELDS = (
    "id",
    "tenant",
    "org_id",
    "project_id",
    "user_id",
    "agent_id",
    "session_id",
    "group_id",
    "role",
    "producer",
    "content",
    "timestamp",
    "metadata",
    "sequence",
    "created_at",
)


class CypherEpisodeStore(Lifecycle):
    """:class:`~memmachine.ports.EpisodeStore` over any Cypher engine, given its dialect.

    Graph model::

        (:Session {key, tenant, org_id, project_id, user_id, session_id, created_at,
                   updated_at, revision})-[:HAS_EPISODE]->(:Episode)
        (:Episode)-[:NEXT]->(:Episode)                       session order
        (:Episode)-[:HAS_DERIVATIVE]->(:Derivative {embedding})   a sentence's vector
        (:UserLedger {key, tenant, org_id, project_id, user_id, revision, deletions,
                      episodes})                             one per user
        (:MemMachineMeta {key, schema_version, embedding_dimensions, embedding_model})

    The ledger numbers the user's writes: every add and delete bumps ``revision`` in its
    own query (and takes the ledger first, so a user's writes are serialised in one order),
    new episodes and their session record the revision that added them, deletions are
    counted. That is what :meth:`index_state` / :meth:`index_entries` give an in-process
    index to catch up from.

    Every ``Episode`` node carries its whole scope (tenant, org_id, project_id, user_id,
    agent_id, session_id, group_id) and id, role, producer, content, timestamp and created_at
    (integer microseconds since the Unix epoch, UTC), metadata (a JSON string: neither engine
    has map properties), sequence, revision, search_text (as given), search_terms and
    term_count (the normalised terms the full-text index holds) and, when the store has
    vectors, embedding.
    Terms depend on the shared analyser: a graph of an older schema has every episode's
    search_text analysed again on ``start()`` (and such episodes then carry terms_version).

    Ids are unique per user (tenant, org, project, user): the same id under another user is
    another episode, so a conflict never reveals what another scope holds. An ``Episode``
    node without a tenant is not an episode (the Neo4j compactor's filler): every read is
    confined to a tenant, and the ledger build and term re-analysis skip it.

    Search:

    * ``vector_search`` scores every in-scope episode with cosine similarity in the query
      itself (an exact scan through the ``user_id`` index), so no other scope can crowd a
      result out; an episode's ``Derivative`` nodes (reached only through it, so they carry
      no scope of their own) are scored too and the episode keeps the best similarity.
    * ``fulltext_search`` takes candidates from the full-text index (any query term) and
      ranks them with BM25 (k1 = 1.2, b = 0.75) computed in the query from the scope's own
      statistics, so scores agree across engines and are not skewed by other scopes.

    Subclasses provide ``start``/``close``/``health`` and :meth:`_run`, which maps driver
    errors to ``StoreUnavailableError`` / ``StoreError`` (and a uniqueness violation to
    ``ConflictError``).
    """

    name = _STORE
    kind: str
    #: The characters of text of episode ``e`` as a Cypher expression: the deletes read it
    #: in the statement that deletes ``e`` and hand the sum to :meth:`_text_deleted`. ``0``:
    #: this engine does not count.
    _text_chars = "0"

    def __init__(
        self,
        dialect: CypherDialect,
        *,
        embedding_dimensions: int | None,
        embedding_model: str | None,
    ) -> None:
        if embedding_dimensions is not None and (
            isinstance(embedding_dimensions, bool) or embedding_dimensions < 1
        ):
            raise ConfigurationError(
                f"embedding_dimensions must be positive, got {embedding_dimensions}"
            )
        self._dialect = dialect
        self._dimensions = embedding_dimensions
        self._model = embedding_model
        self._instance: str | None = None

    @property
    def embedding_dimensions(self) -> int | None:
        return self._dimensions

    @property
    def identity(self) -> str | None:
        """Which graph or database this is, once started: the engine and a random id the
        store keeps in its settings node (set when first opened), so files derived from
        one store's episodes are never taken for another's, nor for the same store's
        after it was recreated. ``None`` before ``start()``."""
        if self._instance is None:
            return None
        return f"{self.kind}:{self._instance}"

    @property
    def _location(self) -> str:
        """Where the episodes live, for messages (``graph 'memmachine'``)."""
        raise NotImplementedError  # pragma: no cover - overridden

    async def _run(
        self,
        cypher: str,
        params: Mapping[str, object] | None = None,
        *,
        read_only: bool = False,
    ) -> list[list[Any]]:
        """Run one parameterised query in one transaction; the rows of its result."""
        raise NotImplementedError  # pragma: no cover - overridden

    # ------------------------------------------------------------------ writes

    async def add_episodes(self, scope: Scope, records: Sequence[EpisodeRecord]) -> list[Episode]:
        """Append ``records`` to the session, atomically, in one query (see the port)."""
        if scope.session_id is None:
            raise InvalidInputError("adding episodes needs a session_id", "session_id")
        if not records:
            return []
        ids = [record.id for record in records]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ConflictError(f"episode ids repeated in the batch: {', '.join(repeated)}")
        rows = [self._record_row(position, record) for position, record in enumerate(records)]
        now = utc_now()
        owner, owner_params = scope_predicate("d", scope.user_scope())
        params: dict[str, object] = {
            **owner_params,
            **_owner_params(scope),
            "ids": ids,
            "records": rows,
            "count": len(rows),
            "user_key": scope.user_key,
            "session_key": _session_key(scope),
            "now": _micros(now),
        }
        embedding = ""
        if self._dimensions is not None:
            vector = self._dialect.vector_value("r.embedding")
            part = self._dialect.vector_value("d.vector")
            embedding = (
                f"SET e.embedding = CASE WHEN r.embedding IS NULL THEN NULL ELSE {vector} END, "
                "e.derivative_count = size(coalesce(r.derivatives, [])) "
                "FOREACH (d IN r.derivatives | "
                f"CREATE (e)-[:HAS_DERIVATIVE]->(:Derivative {{embedding: {part}, "
                "weight: d.weight}))"
            )
        # The user's ledger, then the session node, are the locks (always in that order):
        # the ledger's update serialises the user's writes and numbers them (the revision an
        # in-process index catches up from), the session's makes each append read the last
        # sequence after the previous append committed.
        try:
            result = await self._run(
                f"""
                OPTIONAL MATCH (d:Episode) WHERE d.id IN $ids AND {owner}
                WITH count(d) AS duplicates
                WHERE duplicates = 0
                {_LEDGER_MERGE}
                SET l.revision = l.revision + 1, l.episodes = l.episodes + $count
                WITH l.revision AS revision
                MERGE (s:Session {{key: $session_key}})
                ON CREATE SET s.tenant = $owner_tenant, s.org_id = $owner_org_id,
                    s.project_id = $owner_project_id, s.user_id = $owner_user_id,
                    s.session_id = $owner_session_id, s.created_at = $now
                SET s.updated_at = $now, s.revision = revision
                WITH s, revision
                OPTIONAL MATCH (s)-[:HAS_EPISODE]->(p:Episode)
                WITH s, revision, p ORDER BY p.sequence DESC LIMIT 1
                WITH s, revision, p, coalesce(p.sequence, 0) AS base
                UNWIND $records AS r
                CREATE (s)-[:HAS_EPISODE]->(e:Episode {{
                    tenant: $owner_tenant, org_id: $owner_org_id,
                    project_id: $owner_project_id, user_id: $owner_user_id,
                    agent_id: $owner_agent_id, session_id: $owner_session_id,
                    group_id: $owner_group_id, id: r.id, role: r.role, producer: r.producer,
                    content: r.content, timestamp: r.timestamp, metadata: r.metadata,
                    sequence: base + r.position, created_at: $now, revision: revision,
                    search_text: r.search_text, search_terms: r.search_terms,
                    term_count: r.term_count
                }})
                {embedding}
                WITH p, base, e ORDER BY e.sequence
                WITH p, base, collect(e) AS created
                WITH base, CASE WHEN p IS NULL THEN created ELSE [p] + created END AS chain
                FOREACH (i IN range(0, size(chain) - 2) |
                    FOREACH (a IN [chain[i]] | FOREACH (b IN [chain[i + 1]] |
                        CREATE (a)-[:NEXT]->(b))))
                RETURN base
                """,
                params,
            )
        except ConflictError:
            result = []  # a concurrent batch won the id: report it like any existing id
        if not result:
            await self._raise_conflict(scope, ids)
        base = int(result[0][0])
        return [
            Episode(
                id=record.id,
                scope=scope,
                role=record.role,
                producer=record.producer,
                content=record.content,
                timestamp=record.timestamp,
                metadata=record.metadata,
                sequence=base + position + 1,
                created_at=_from_micros(_micros(now)),
            )
            for position, record in enumerate(records)
        ]

    async def delete_episode(
        self, scope: Scope, episode_id: str, *, stored_at: datetime | None = None
    ) -> bool:
        """Delete one in-scope episode (with ``stored_at``: only if stored then), link its
        neighbours, drop an emptied session."""
        where, params = scope_predicate("e", scope)
        result = await self._run(
            f"""
            {_LEDGER_MERGE}
            SET l.revision = l.revision + 1
            WITH l
            MATCH (s:Session)-[:HAS_EPISODE]->(e:Episode)
            WHERE e.id = $episode_id AND {where}
                AND ($stored_at IS NULL OR e.created_at = $stored_at)
            SET l.deletions = l.deletions + 1, l.episodes = l.episodes - 1
            WITH s, e, {self._text_chars} AS chars
            OPTIONAL MATCH (p:Episode)-[:NEXT]->(e)
            OPTIONAL MATCH (e)-[:NEXT]->(n:Episode)
            OPTIONAL MATCH (e)-[:HAS_DERIVATIVE]->(x:Derivative)
            WITH s, e, chars, p, n, collect(x) AS parts
            FOREACH (y IN parts | DETACH DELETE y)
            DETACH DELETE e
            WITH s, chars, p, n
            FOREACH (a IN CASE WHEN p IS NULL OR n IS NULL THEN [] ELSE [p] END |
                CREATE (a)-[:NEXT]->(n))
            WITH s, chars
            OPTIONAL MATCH (s)-[:HAS_EPISODE]->(rest:Episode)
            WITH s, chars, count(rest) AS remaining
            FOREACH (x IN CASE WHEN remaining = 0 THEN [s] ELSE [] END | DELETE x)
            RETURN chars
            """,
            {
                **params,
                **_ledger_params(scope),
                "episode_id": episode_id,
                "stored_at": None if stored_at is None else _micros(stored_at),
            },
        )
        if result:
            self._text_deleted(int(result[0][0] or 0))
        return bool(result)

    async def delete_episodes(self, scope: Scope) -> int:
        """Delete every in-scope episode; relink what is left of each touched session and
        drop the sessions left empty. Returns how many episodes were deleted."""
        where, params = scope_predicate("e", scope)
        result = await self._run(
            f"""
            {_LEDGER_MERGE}
            SET l.revision = l.revision + 1
            WITH l
            MATCH (s:Session)-[:HAS_EPISODE]->(e:Episode) WHERE {where}
            OPTIONAL MATCH (e)-[:HAS_DERIVATIVE]->(x:Derivative)
            WITH l, s, e, collect(x) AS parts
            FOREACH (y IN parts | DETACH DELETE y)
            WITH l, s, collect(e) AS doomed, sum({self._text_chars}) AS chars
            FOREACH (x IN doomed | DETACH DELETE x)
            WITH l, s, size(doomed) AS deleted, chars
            OPTIONAL MATCH (s)-[:HAS_EPISODE]->(r:Episode)
            WITH l, s, deleted, chars, r ORDER BY r.sequence
            WITH l, s, deleted, chars, collect(r) AS rest
            FOREACH (i IN range(0, size(rest) - 2) |
                FOREACH (a IN [rest[i]] | FOREACH (b IN [rest[i + 1]] |
                    MERGE (a)-[:NEXT]->(b))))
            FOREACH (x IN CASE WHEN size(rest) = 0 THEN [s] ELSE [] END | DELETE x)
            WITH l, sum(deleted) AS total, sum(chars) AS chars
            SET l.episodes = l.episodes - total,
                l.deletions = l.deletions + CASE WHEN total > 0 THEN 1 ELSE 0 END
            RETURN total, chars
            """,
            {**params, **_ledger_params(scope)},
        )
        if not result or result[0][0] is None:
            return 0
        self._text_deleted(int(result[0][1] or 0))
        return int(result[0][0])

    def _text_deleted(self, chars: int) -> None:
        """A delete took episodes holding ``chars`` characters of text (:attr:`_text_chars`);
        a store that scrubs its files after a forget counts them here."""

    # ------------------------------------------------------------------ reads

    async def get_episode(self, scope: Scope, episode_id: str) -> Episode | None:
        where, params = scope_predicate("e", scope)
        rows = await self._run(
            f"MATCH (e:Episode) WHERE e.id = $episode_id AND {where} "
            f"RETURN {_columns('e')} LIMIT 1",
            {**params, "episode_id": episode_id},
            read_only=True,
        )
        return _episode_from_row(rows[0]) if rows else None

    async def list_episodes(
        self, scope: Scope, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> list[Episode]:
        """In-scope episodes by (timestamp, sequence, id), oldest first unless
        ``newest_first``."""
        if offset < 0:
            raise InvalidInputError("offset must not be negative", "offset")
        if limit <= 0:
            return []
        where, params = scope_predicate("e", scope)
        order = "DESC" if newest_first else "ASC"
        rows = await self._run(
            f"MATCH (e:Episode) WHERE {where} "
            f"WITH e ORDER BY e.timestamp {order}, e.sequence {order}, e.id {order} "
            f"SKIP $offset LIMIT $limit "
            f"RETURN {_columns('e')}",
            {**params, "offset": offset, "limit": limit},
            read_only=True,
        )
        return [_episode_from_row(row) for row in rows]

    async def count_episodes(self, scope: Scope) -> int:
        where, params = scope_predicate("e", scope)
        rows = await self._run(
            f"MATCH (e:Episode) WHERE {where} RETURN count(e)", params, read_only=True
        )
        return int(rows[0][0])

    async def neighbours(
        self, scope: Scope, episode_id: str, *, before: int, after: int
    ) -> list[Episode]:
        """Up to ``before``/``after`` in-scope episodes around ``episode_id`` in its session,
        in session order, the episode itself excluded."""
        before, after = max(before, 0), max(after, 0)
        if before == 0 and after == 0:
            return []
        anchor, params = scope_predicate("e", scope)
        other, _ = scope_predicate("x", scope)
        rows = await self._run(
            f"""
            MATCH (s:Session)-[:HAS_EPISODE]->(e:Episode)
            WHERE e.id = $episode_id AND {anchor}
            MATCH (s)-[:HAS_EPISODE]->(x:Episode)
            WHERE x.sequence <> e.sequence AND {other}
            WITH e, x ORDER BY x.sequence
            WITH e, collect(x) AS around
            WITH [y IN around WHERE y.sequence < e.sequence] AS earlier,
                 [y IN around WHERE y.sequence > e.sequence] AS later
            WITH earlier[CASE WHEN size(earlier) > $before
                              THEN size(earlier) - $before ELSE 0 END..]
                 + later[..$after] AS picked
            UNWIND picked AS x
            RETURN {_columns("x")}
            """,
            {**params, "episode_id": episode_id, "before": before, "after": after},
            read_only=True,
        )
        return sorted((_episode_from_row(row) for row in rows), key=lambda e: e.sequence)

    async def adjacent(self, scope: Scope, episode_ids: Sequence[str]) -> dict[str, list[Episode]]:
        """For each in-scope id, the nearest in-scope episode before and after it in its
        session (in session order), in one query."""
        if not episode_ids:
            return {}
        anchor, params = scope_predicate("e", scope)
        earlier, _ = scope_predicate("x", scope)
        later, _ = scope_predicate("y", scope)
        rows = await self._run(
            f"""
            MATCH (s:Session)-[:HAS_EPISODE]->(e:Episode)
            WHERE e.id IN $ids AND {anchor}
            OPTIONAL MATCH (s)-[:HAS_EPISODE]->(x:Episode)
            WHERE x.sequence < e.sequence AND {earlier}
            WITH s, e, x ORDER BY x.sequence DESC
            WITH s, e, head(collect(x)) AS previous
            OPTIONAL MATCH (s)-[:HAS_EPISODE]->(y:Episode)
            WHERE y.sequence > e.sequence AND {later}
            WITH e, previous, y ORDER BY y.sequence ASC
            WITH e, previous, head(collect(y)) AS following
            UNWIND [previous, following] AS n
            RETURN {_columns("n")}, e.id
            """,
            {**params, "ids": list(dict.fromkeys(episode_ids))},
            read_only=True,
        )
        out: dict[str, list[Episode]] = {}
        for row in rows:
            neighbours = out.setdefault(str(row[-1]), [])
            if row[0] is not None:  # no episode on that side
                neighbours.append(_episode_from_row(row))
        return {key: sorted(value, key=lambda e: e.sequence) for key, value in out.items()}

    # ------------------------------------------------------------------ index support

    async def index_state(self, scope: Scope) -> IndexState:
        """The user's ledger: revision, deletions and episode count (zeros when none)."""
        rows = await self._run(
            "MATCH (l:UserLedger {key: $key}) RETURN l.revision, l.deletions, l.episodes",
            {"key": scope.user_key},
            read_only=True,
        )
        if not rows:
            return IndexState(0, 0, 0)
        revision, deletions, episodes = rows[0]
        return IndexState(int(revision or 0), int(deletions or 0), int(episodes or 0))

    async def index_entries(
        self, scope: Scope, *, since: int | None = None, batch: int = _ENTRY_BATCH
    ) -> AsyncIterator[list[IndexEntry]]:
        """The user's episodes as :class:`IndexEntry` batches of at most about ``batch``;
        with ``since`` only those added at a later revision. Reads the sessions changed
        since then, then their episodes: small sessions several to a query, a large one in
        pages by sequence."""
        where, params = scope_predicate("s", scope.user_scope())
        floor = -1 if since is None else since
        sessions = await self._run(
            f"""
            MATCH (s:Session) WHERE {where} AND coalesce(s.revision, 0) > $since
            RETURN s.key, size([(s)-[:HAS_EPISODE]->(e:Episode) | e.id])
            ORDER BY s.key
            """,
            {**params, "since": floor},
            read_only=True,
        )
        group: list[str] = []
        grouped = 0
        for key, size in sessions:
            size = int(size or 0)
            if size > batch:
                async for entries in self._session_entries(str(key), floor, batch):
                    yield entries
                continue
            if group and grouped + size > batch:
                yield await self._entries_of(group, floor)
                group, grouped = [], 0
            group.append(str(key))
            grouped += size
        if group:
            entries = await self._entries_of(group, floor)
            if entries:
                yield entries

    async def _entries_of(self, session_keys: list[str], since: int) -> list[IndexEntry]:
        # ``WITH e WHERE``: a filter on ``e`` in the MATCH itself makes FalkorDB start from
        # a scan of every episode instead of the session key index (x500 at 30k episodes).
        return await self._read_entries(
            """
            UNWIND $keys AS key
            MATCH (s:Session {key: key})-[:HAS_EPISODE]->(e:Episode)
            WITH e WHERE coalesce(e.revision, 0) > $since
            """,
            {"keys": session_keys, "since": since},
        )

    async def _session_entries(
        self, session_key: str, since: int, batch: int
    ) -> AsyncIterator[list[IndexEntry]]:
        after = 0
        while True:
            entries = await self._read_entries(
                """
                MATCH (s:Session {key: $key})-[:HAS_EPISODE]->(e:Episode)
                WITH e WHERE e.sequence > $after AND coalesce(e.revision, 0) > $since
                WITH e ORDER BY e.sequence LIMIT $batch
                """,
                {"key": session_key, "after": after, "since": since, "batch": batch},
            )
            if not entries:
                return
            yield entries
            if len(entries) < batch:
                return
            after = max(entry.sequence for entry in entries)

    async def _read_entries(self, select: str, params: dict[str, object]) -> list[IndexEntry]:
        """The entries of the episodes ``e`` that ``select`` yields: their columns in one
        query, their derivatives (one row each, so no list has to be read back as text) in
        another. Rows are turned into entries in a worker thread when there are many
        (reading a vector written as text costs ~80 µs)."""
        rows = await self._run(
            f"{select} RETURN {_ENTRY_COLUMNS}, {_columns('e')}", params, read_only=True
        )
        if not rows:
            return []
        parts: list[list[Any]] = []
        if self._dimensions is not None:
            parts = await self._run(
                f"{select} MATCH (e)-[:HAS_DERIVATIVE]->(x:Derivative) "
                "RETURN e.id, x.embedding, coalesce(x.weight, 1.0)",
                params,
                read_only=True,
            )

        def convert() -> list[IndexEntry]:
            read = self._dialect.vector_from_result
            found: dict[str, list[tuple[Any, float]]] = {}
            for episode_id, vector, weight in parts:
                if vector is not None:
                    found.setdefault(str(episode_id), []).append((vector, float(weight)))
            return [self._entry_from_row(row, found.get(str(row[0]), []), read) for row in rows]

        if len(rows) + len(parts) < _PARSE_IN_THREAD:
            return convert()
        return await asyncio.to_thread(convert)

    @staticmethod
    def _entry_from_row(
        row: Sequence[Any],
        parts: list[tuple[Any, float]],
        read: Callable[[object], npt.NDArray[np.float32]],
    ) -> IndexEntry:
        (
            episode_id,
            session_id,
            agent_id,
            group_id,
            sequence,
            timestamp,
            revision,
            terms,
            embedding,
        ) = row[:_ENTRY_COLUMN_COUNT]
        return IndexEntry(
            id=str(episode_id),
            session_id=str(session_id),
            agent_id=agent_id,
            group_id=group_id,
            sequence=int(sequence),
            timestamp=int(timestamp),
            revision=int(revision or 0),
            terms=tuple(str(terms or "").split()),
            embedding=None if embedding is None else read(embedding),
            derivatives=tuple(read(vector) for vector, _ in parts),
            derivative_weights=tuple(weight for _, weight in parts),
            episode=_episode_from_row(row[_ENTRY_COLUMN_COUNT:]),
        )

    async def get_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> list[Episode]:
        """The in-scope episodes among ``episode_ids``, in the order of the ids (missing or
        out-of-scope ids left out), in one query."""
        if not episode_ids:
            return []
        wanted = list(dict.fromkeys(episode_ids))
        where, params = scope_predicate("e", scope)
        rows = await self._run(
            f"MATCH (e:Episode) WHERE e.id IN $ids AND {where} RETURN {_columns('e')}",
            {**params, "ids": wanted},
            read_only=True,
        )
        found = {str(row[0]): _episode_from_row(row) for row in rows}
        return [found[key] for key in wanted if key in found]

    # ------------------------------------------------------------------ inspection

    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]:
        """The project's users holding episodes, by user id, from their ledgers (one per
        user, counting its episodes), with their sessions counted through the
        ``Session.user_id`` index."""
        if limit < 1:
            return []
        filters = [
            "l.tenant = $tenant",
            "l.org_id = $org_id",
            "l.project_id = $project_id",
            "l.episodes > 0",
        ]
        params: dict[str, object] = {
            "tenant": project.tenant,
            "org_id": project.org_id,
            "project_id": project.project_id,
            "limit": limit,
        }
        if after is not None:
            filters.append("l.user_id > $after")
            params["after"] = after
        if prefix:
            filters.append("l.user_id STARTS WITH $prefix")
            params["prefix"] = prefix
        rows = await self._run(
            f"""
            MATCH (l:UserLedger) WHERE {" AND ".join(filters)}
            WITH l ORDER BY l.user_id LIMIT $limit
            OPTIONAL MATCH (s:Session)
            WHERE s.user_id = l.user_id AND s.tenant = l.tenant AND s.org_id = l.org_id
              AND s.project_id = l.project_id
            RETURN l.user_id, l.episodes, count(s), max(s.updated_at)
            """,
            params,
            read_only=True,
        )
        users = [
            UserActivity(
                user_id=str(user_id),
                episodes=int(episodes),
                sessions=int(sessions),
                last_active=None if latest is None else _from_micros(int(latest)),
            )
            for user_id, episodes, sessions, latest in rows
        ]
        return sorted(users, key=lambda user: user.user_id)

    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]:
        """Every project with a user ledger counting episodes (ledger ids only)."""
        if limit < 1:
            return []
        rows = await self._run(
            "MATCH (l:UserLedger) WHERE l.episodes > 0 "
            "RETURN DISTINCT l.tenant, l.org_id, l.project_id",
            {},
            read_only=True,
        )
        found = [(str(tenant), str(org), str(project)) for tenant, org, project in rows]
        return page_of_projects(found, after, limit)

    async def list_sessions(
        self, scope: Scope, *, limit: int = 100, offset: int = 0
    ) -> list[SessionActivity]:
        """The user's sessions, most recently added to first; the page is chosen on the
        session nodes, then only its sessions' episodes are counted."""
        if offset < 0:
            raise InvalidInputError("offset must not be negative", "offset")
        if limit < 1:
            return []
        where, params = scope_predicate("s", scope.user_scope())
        rows = await self._run(
            f"""
            MATCH (s:Session) WHERE {where}
            WITH s ORDER BY s.updated_at DESC, s.session_id ASC SKIP $offset LIMIT $limit
            MATCH (s)-[:HAS_EPISODE]->(e:Episode)
            WITH s, count(e) AS episodes, min(e.timestamp) AS first, max(e.timestamp) AS last
            RETURN s.session_id, episodes, first, last, s.updated_at
            ORDER BY s.updated_at DESC, s.session_id ASC
            """,
            {**params, "offset": offset, "limit": limit},
            read_only=True,
        )
        return [
            SessionActivity(
                session_id=str(session_id),
                episodes=int(episodes),
                first_at=_from_micros(int(first)),
                last_at=_from_micros(int(last)),
                updated_at=_from_micros(int(updated)),
            )
            for session_id, episodes, first, last, updated in rows
        ]

    async def episode_timeline(
        self, scope: Scope, *, bucket_seconds: int = 86_400
    ) -> list[TimeBucket]:
        """In-scope episodes counted per epoch-aligned bucket of their timestamps."""
        if isinstance(bucket_seconds, bool) or bucket_seconds < 1:
            raise InvalidInputError("bucket_seconds must be at least 1", "bucket_seconds")
        where, params = scope_predicate("e", scope)
        width = bucket_seconds * 1_000_000
        rows = await self._run(
            f"""
            MATCH (e:Episode) WHERE {where}
            WITH e.timestamp - ((e.timestamp % $width) + $width) % $width AS start
            RETURN start, count(*) ORDER BY start
            """,
            {**params, "width": width},
            read_only=True,
        )
        return [TimeBucket(start=_from_micros(int(start)), count=int(n)) for start, n in rows]

    # ------------------------------------------------------------------ search

    async def vector_search(
        self, scope: Scope, embedding: Sequence[float], k: int, *, derivatives: bool = True
    ) -> list[tuple[Episode, float]]:
        """The ``k`` in-scope episodes most similar to ``embedding`` (exact cosine scan); with
        ``derivatives`` an episode scores the best of its own and its sentences' vectors.

        Two scans, merged: the episodes' own vectors, and the sentence vectors of only the
        episodes that have some (``derivative_count`` > 0). The merge is exact: an episode
        in the true top ``k`` by its best score is in the top ``k`` of the scan its best
        score comes from."""
        if self._dimensions is None or k <= 0:
            return []
        vector = checked_vector(embedding, self._dimensions, "embedding")
        where, params = scope_predicate("e", scope)
        values = {**params, "vector": vector, "k": k}
        own = self._dialect.cosine_similarity("e.embedding", "vector")
        scans = [
            self._run(
                f"""
                MATCH (e:Episode) WHERE {where} AND e.embedding IS NOT NULL
                WITH e, {own} AS score
                ORDER BY score DESC, e.id ASC LIMIT $k
                RETURN {_columns("e")}, score
                """,
                values,
                read_only=True,
            )
        ]
        if derivatives:
            scans.append(self._best_sentences(where, values, k))
        best: dict[str, tuple[Episode, float]] = {}
        for rows in await asyncio.gather(*scans):
            for row in rows:
                episode, score = _episode_from_row(row), float(row[-1])
                if episode.id not in best or score > best[episode.id][1]:
                    best[episode.id] = (episode, score)
        ranked = sorted(best.values(), key=lambda hit: (-hit[1], hit[0].id))
        return ranked[:k]

    async def _best_sentences(
        self, where: str, values: dict[str, object], k: int
    ) -> list[list[object]]:
        """The ``k`` in-scope episodes whose best sentence vector is most similar, one row
        each (episode columns, score). Sentences are ranked one by one (grouping them per
        episode in the query costs ~3x); the first ``k`` distinct episodes of that ranking
        are the answer, so the limit grows until it holds ``k`` of them or every sentence."""
        part = self._dialect.cosine_similarity("x.embedding", "vector")
        part = f"coalesce(x.weight, 1.0) * {part}"
        limit = 4 * k
        while True:
            rows = await self._run(
                f"""
                MATCH (e:Episode) WHERE {where} AND e.derivative_count > 0
                MATCH (e)-[:HAS_DERIVATIVE]->(x:Derivative)
                WITH e, {part} AS score
                ORDER BY score DESC, e.id ASC LIMIT $limit
                RETURN {_columns("e")}, score
                """,
                {**values, "limit": limit},
                read_only=True,
            )
            firsts: dict[object, list[object]] = {}
            for row in rows:
                firsts.setdefault(row[0], row)
            if len(firsts) >= k or len(rows) < limit:
                return list(firsts.values())[:k]
            limit *= 4

    async def fulltext_search(
        self, scope: Scope, query: str, k: int
    ) -> list[tuple[Episode, float]]:
        """In-scope episodes matching any query term, ranked by BM25 over the scope."""
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        where, params = scope_predicate("e", scope)
        in_scope, _ = scope_predicate("s", scope)
        candidates = self._dialect.fulltext_candidates(
            FULLTEXT_INDEX, "Episode", "fulltext_query", "e"
        )
        rows = await self._run(
            f"""
            MATCH (s:Episode) WHERE {in_scope}
            WITH count(s) AS documents, avg(s.term_count) AS average_length
            {candidates}
            WHERE {where}
            WITH documents, average_length, e,
                 [t IN $terms | size(split(e.search_terms, ' ' + t + ' ')) - 1] AS tf
            WITH documents, average_length, collect(e) AS matches, collect(tf) AS tfs
            WITH documents, average_length, matches, tfs,
                 [i IN range(0, size($terms) - 1) | size([f IN tfs WHERE f[i] > 0])] AS df
            WITH average_length, matches, tfs,
                 [n IN df | log(1.0 + (documents - n + 0.5) / (n + 0.5))] AS idf
            UNWIND range(0, size(matches) - 1) AS m
            WITH matches[m] AS e, tfs[m] AS tf, idf,
                 $k1 * (1.0 - $b + $b * matches[m].term_count / average_length) AS norm
            WITH e, reduce(total = 0.0, i IN range(0, size(idf) - 1) |
                 total + idf[i] * tf[i] * ($k1 + 1.0) / (tf[i] + norm)) AS score
            WHERE score > 0
            WITH e, score ORDER BY score DESC, e.timestamp DESC, e.id ASC LIMIT $k
            RETURN {_columns("e")}, score
            """,
            {
                **params,
                "fulltext_query": self._dialect.fulltext_query(terms),
                "terms": terms,
                "k": k,
                "k1": BM25_K1,
                "b": BM25_B,
            },
            read_only=True,
        )
        hits = [(_episode_from_row(row), float(row[-1])) for row in rows]
        return sorted(hits, key=lambda hit: -hit[1])

    # ------------------------------------------------------------------ internals

    def _record_row(self, position: int, record: EpisodeRecord) -> dict[str, object]:
        """One ``$records`` entry: the record's properties as stored."""
        terms = document_terms(record.search_text)
        row: dict[str, object] = {
            "position": position + 1,
            "id": record.id,
            "role": record.role,
            "producer": record.producer,
            "content": record.content,
            "timestamp": _micros(record.timestamp),
            "metadata": json.dumps(record.metadata, ensure_ascii=False, separators=(",", ":")),
            "search_text": record.search_text,
            "search_terms": joined_terms(terms),
            "term_count": len(terms),
            "embedding": None,
            "derivatives": [],
        }
        if self._dimensions is not None and record.embedding is not None:
            row["embedding"] = checked_vector(
                record.embedding, self._dimensions, f"records.{position}.embedding"
            )
        if self._dimensions is not None:
            weights = _derivative_weights(record, position)
            row["derivatives"] = [
                {
                    "vector": checked_vector(
                        vector, self._dimensions, f"records.{position}.derivative_embeddings"
                    ),
                    "weight": weight,
                }
                for vector, weight in zip(record.derivative_embeddings, weights, strict=True)
            ]
        return row

    async def _raise_conflict(self, scope: Scope, ids: list[str]) -> None:
        where, params = scope_predicate("d", scope.user_scope())
        rows = await self._run(
            f"MATCH (d:Episode) WHERE d.id IN $ids AND {where} RETURN d.id",
            {**params, "ids": ids},
            read_only=True,
        )
        existing = sorted(str(row[0]) for row in rows) or ids
        raise ConflictError(f"episode ids already exist: {', '.join(existing)}")

    async def _check_meta(self) -> None:
        """Record the embedding settings on first use; refuse different ones later."""
        rows = await self._run(
            """
            MERGE (m:MemMachineMeta {key: $key})
            ON CREATE SET m.schema_version = $schema_version, m.created_at = $now
            WITH m
            SET m.instance = coalesce(m.instance, $instance)
            WITH m
            SET m.embedding_model = CASE
                WHEN $dimensions IS NOT NULL AND (m.embedding_dimensions IS NULL
                     OR m.embedding_dimensions = $dimensions)
                THEN coalesce(m.embedding_model, $model) ELSE m.embedding_model END
            WITH m
            SET m.embedding_dimensions = coalesce(m.embedding_dimensions, $dimensions)
            RETURN m.embedding_dimensions, m.embedding_model, m.schema_version, m.instance
            """,
            {
                "key": _META_KEY,
                "instance": uuid.uuid4().hex,
                "schema_version": _SCHEMA_VERSION,
                "now": _micros(utc_now()),
                "dimensions": self._dimensions,
                "model": self._model,
            },
        )
        stored_dimensions, stored_model, schema_version, instance = rows[0]
        self._instance = str(instance)
        version = 1 if schema_version is None else int(schema_version)
        if version > _SCHEMA_VERSION:
            raise ConfigurationError(
                f"{self._location} was written by a newer memmachine "
                f"(episode schema {schema_version}, this one knows {_SCHEMA_VERSION})"
            )
        self._check_embedding_settings(stored_dimensions, stored_model)
        if version < _SCHEMA_VERSION:
            await self._reindex_terms()
            if version < 3:
                await self._build_ledgers()
            await self._run(
                "MATCH (m:MemMachineMeta {key: $key}) SET m.schema_version = $schema_version",
                {"key": _META_KEY, "schema_version": _SCHEMA_VERSION},
            )

    def _check_embedding_settings(self, stored_dimensions: Any, stored_model: Any) -> None:
        """Refuse vectors of another dimension or model than the graph was built with."""
        if self._dimensions is None:
            return
        built = (
            f"{self._location} holds {stored_dimensions}-dimensional vectors"
            f" from {stored_model or 'an unnamed model'}"
        )
        wanted = f"this store is configured for {self._dimensions} dimensions" + (
            f" from {self._model}" if self._model else ""
        )
        advice = "use the same embedding model, another graph or database, or re-embed the episodes"
        if stored_dimensions is not None and int(stored_dimensions) != self._dimensions:
            raise ConfigurationError(f"{built}; {wanted}: {advice}")
        if stored_model and self._model and stored_model != self._model:
            raise ConfigurationError(f"{built}; {wanted}: {advice}")

    async def _build_ledgers(self) -> None:
        """Give every user who has episodes a ledger counting them (revision 0: their
        episodes predate revisions). Idempotent: an existing ledger keeps its numbers."""
        await self._run(
            """
            MATCH (e:Episode) WHERE e.tenant IS NOT NULL
            WITH e.tenant AS tenant, e.org_id AS org_id, e.project_id AS project_id,
                 e.user_id AS user_id, count(e) AS episodes
            MERGE (l:UserLedger {key: tenant + '/' + org_id + '/' + project_id + '/' + user_id})
            ON CREATE SET l.tenant = tenant, l.org_id = org_id, l.project_id = project_id,
                l.user_id = user_id, l.revision = 0, l.deletions = 0, l.episodes = episodes
            """
        )

    async def _reindex_terms(self) -> int:
        """Analyse every episode's ``search_text`` again with the current analyser and store
        its ``search_terms`` / ``term_count``, in batches; returns how many were updated.
        Each updated episode records ``terms_version``, so an interrupted run resumes."""
        done = 0
        while True:
            rows = await self._run(
                """
                MATCH (e:Episode)
                WHERE e.tenant IS NOT NULL AND coalesce(e.terms_version, 1) < $version
                RETURN e.tenant, e.org_id, e.project_id, e.user_id, e.id, e.search_text
                LIMIT $batch
                """,
                {"version": ANALYSER_VERSION, "batch": _REINDEX_BATCH},
                read_only=True,
            )
            if not rows:
                return done
            updates = []
            for tenant, org_id, project_id, user_id, episode_id, search_text in rows:
                terms = document_terms(str(search_text or ""))
                updates.append(
                    {
                        "tenant": tenant,
                        "org_id": org_id,
                        "project_id": project_id,
                        "user_id": user_id,
                        "id": episode_id,
                        "terms": joined_terms(terms),
                        "count": len(terms),
                    }
                )
            result = await self._run(
                """
                UNWIND $rows AS r
                MATCH (e:Episode {id: r.id, user_id: r.user_id})
                WHERE coalesce(e.tenant, '') = coalesce(r.tenant, '')
                  AND coalesce(e.org_id, '') = coalesce(r.org_id, '')
                  AND coalesce(e.project_id, '') = coalesce(r.project_id, '')
                  AND coalesce(e.terms_version, 1) < $version
                SET e.search_terms = r.terms, e.term_count = r.count,
                    e.terms_version = $version
                RETURN count(e)
                """,
                {"rows": updates, "version": ANALYSER_VERSION},
            )
            updated = int(result[0][0]) if result else 0
            if updated == 0:
                raise StoreError(
                    f"re-indexing the episodes of {self._location} made no progress",
                    store=_STORE,
                )
            done += updated


# ---------------------------------------------------------------------- store helpers


def _columns(alias: str) -> str:
    return ", ".join(f"{alias}.{field} AS {field}" for field in _EPISODE_FIELDS)


def _owner_params(scope: Scope) -> dict[str, object]:
    """The scope written onto new episodes and sessions, as ``$owner_<field>``."""
    return {f"owner_{field}": getattr(scope, field) for field in _EPISODE_FIELDS[1:8]}


#: Finds or creates the user's ledger ``l`` (see :class:`CypherEpisodeStore`); needs the
#: parameters of :func:`_ledger_params`.
_LEDGER_MERGE = """
    MERGE (l:UserLedger {key: $user_key})
    ON CREATE SET l.tenant = $owner_tenant, l.org_id = $owner_org_id,
        l.project_id = $owner_project_id, l.user_id = $owner_user_id,
        l.revision = 0, l.deletions = 0, l.episodes = 0
"""


def _ledger_params(scope: Scope) -> dict[str, object]:
    return {"user_key": scope.user_key, **_owner_params(scope)}


def _derivative_weights(record: EpisodeRecord, position: int) -> list[float]:
    """The record's derivative weights, checked: one per derivative (or none: 1.0 each),
    finite and positive."""
    field = f"records.{position}.derivative_weights"
    if not record.derivative_weights:
        return [1.0] * len(record.derivative_embeddings)
    if len(record.derivative_weights) != len(record.derivative_embeddings):
        raise InvalidInputError(
            f"{len(record.derivative_weights)} weights for "
            f"{len(record.derivative_embeddings)} derivative vectors",
            field,
        )
    weights = [float(weight) for weight in record.derivative_weights]
    if not all(math.isfinite(weight) and weight > 0 for weight in weights):
        raise InvalidInputError("derivative weights must be finite and positive", field)
    return weights


def _session_key(scope: Scope) -> str:
    return f"{scope.user_key}/{scope.session_id}"


def _episode_from_row(row: Sequence[Any]) -> Episode:
    """An episode from the columns of :func:`_columns`. The values were validated when the
    episode was stored, so the models are built without validating them again (a search
    builds a hundred of these; validation was half the cost)."""
    (
        episode_id,
        tenant,
        org_id,
        project_id,
        user_id,
        agent_id,
        session_id,
        group_id,
        role,
        producer,
        content,
        timestamp,
        metadata,
        sequence,
        created_at,
    ) = row[: len(_EPISODE_FIELDS)]
    scope = Scope.model_construct(
        tenant=str(tenant),
        org_id=str(org_id),
        project_id=str(project_id),
        user_id=str(user_id),
        agent_id=None if agent_id is None else str(agent_id),
        session_id=None if session_id is None else str(session_id),
        group_id=None if group_id is None else str(group_id),
    )
    return Episode.model_construct(
        id=str(episode_id),
        scope=scope,
        role=str(role),
        producer=None if producer is None else str(producer),
        content=str(content),
        timestamp=_from_micros(int(timestamp)),
        metadata=json.loads(metadata) if metadata else {},
        sequence=int(sequence),
        created_at=_from_micros(int(created_at)),
    )


def _micros(value: datetime) -> int:
    """Microseconds since the Unix epoch (naive datetimes are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    micros: int = (value - _EPOCH) // _MICROSECOND
    return micros


def _from_micros(value: int) -> datetime:
    return _EPOCH + value * _MICROSECOND
