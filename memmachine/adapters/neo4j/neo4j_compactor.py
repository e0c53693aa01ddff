"""Compaction of a Neo4j database after a forget.

Deleting a node does not remove its text from Neo4j's files. Measured on Neo4j 5.26
Community (RELIABILITY.md, "Neo4j files after a forget"): the transaction log keeps the
create and the before-image of the delete until the log is rotated and a checkpoint prunes
it, and the string store (``neostore.propertystore.db.strings``) keeps a freed record's
bytes until Neo4j reuses the record for a new long string. Community has no
``db.checkpoint()`` and no way to zero a record, so :meth:`Neo4jCompactor.compact` makes
Neo4j do both itself, with writes of its own:

1. it waits ``settle_seconds`` (so the records the forget freed become reusable);
2. it writes filler nodes (label ``MemMachineForgetFiller``, no tenant, random text in long
   strings) totalling ``scrub_bytes`` in batches: new long strings take the freed string
   and property records first, and the log grows past its rotation size. With
   ``fulltext`` = (label, property) the filler also carries that label and property, so
   the full-text index gets new documents: Neo4j's Lucene writer merges small segments
   two at a time (a log merge policy, merge factor 2) when it flushes at a checkpoint, and
   a merge drops the deleted documents; measured, the forgotten words stayed in a ``.cfs``
   segment file without this and were gone with it;
3. it deletes the filler, waits ``settle_seconds`` for the checkpoint that prunes the old
   log files, and repeats from 2 ``rounds`` times (the first checkpoint after a rotation
   may still cover the file that holds the forgotten text);
4. it checks that no filler node is left (a run cut short leaves some: the next run
   deletes them first).

That reaches the files only on a server configured for it (``neo4j.conf``, see README.md
"Neo4j and forget"): ``db.tx_log.rotation.retention_policy=false`` (keep no log file
older than the last checkpoint), ``db.tx_log.rotation.size`` small next to
``scrub_bytes`` (e.g. ``128K``), ``db.tx_log.preallocate=false`` and a checkpoint at
least every ``settle_seconds`` (``db.checkpoint.interval.time=1s``,
``db.checkpoint.interval.tx=1``). The settings are read with ``SHOW SETTINGS`` when the
user may; a server configured otherwise is compacted all the same and logged as such.
Filler nodes have no tenant, so no read of episodes (each confined to a tenant) ever sees
them, and the store's label-wide maintenance at start skips nodes without a tenant; they
live for the run only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from memmachine.errors import StoreError

__all__ = ["DEFAULT_MAX_SCRUB_BYTES", "FILLER_LABEL", "Neo4jCompactor"]

log = logging.getLogger(__name__)

#: The label of the filler nodes (nothing of the store's reads matches it).
FILLER_LABEL = "MemMachineForgetFiller"
#: Characters of random text per filler property: eight string records of 128 bytes.
_CHUNK_UUIDS = 28
_CHUNK_CHARS = 36 * _CHUNK_UUIDS
_PROPERTIES = ("a", "b", "c", "d")
_NODE_BYTES = _CHUNK_CHARS * len(_PROPERTIES)
#: The most filler a run writes per round, by default.
DEFAULT_MAX_SCRUB_BYTES = 64 << 20
#: Filler nodes per transaction (about 400 KB of text: well inside a query's timeout).
_BATCH_NODES = 100
#: The settings a compaction needs to reach the files, and the values it needs.
WANTED_SETTINGS = {
    "db.tx_log.rotation.retention_policy": "false",
    "db.tx_log.preallocate": "false",
}

Run = Callable[[str, Mapping[str, object] | None], Awaitable[list[list[Any]]]]


class Neo4jCompactor:
    """Scrubs one Neo4j database's files after a forget (see the module docstring).

    ``run`` runs one parameterised write query (the store's, bounded by its timeout);
    ``deleted_bytes`` says how many bytes of text the store deleted since the last run and
    ``reset`` forgets them once a run succeeded. The filler written per round is twice
    that, at least ``min_scrub_bytes`` and at most ``max_scrub_bytes`` (a larger forget is
    scrubbed over several runs' worth of the maximum, logged)."""

    def __init__(
        self,
        run: Run,
        *,
        name: str,
        where: str,
        deleted_bytes: Callable[[], int],
        reset: Callable[[int], None],
        min_scrub_bytes: int = 1 << 20,
        max_scrub_bytes: int = DEFAULT_MAX_SCRUB_BYTES,
        rounds: int = 2,
        settle_seconds: float = 2.5,
        fulltext: tuple[str, str] | None = None,
    ) -> None:
        if not 0 < min_scrub_bytes <= max_scrub_bytes:
            raise ValueError("need 0 < min_scrub_bytes <= max_scrub_bytes")
        if rounds < 1 or settle_seconds < 0:
            raise ValueError("need rounds >= 1 and settle_seconds >= 0")
        self.name, self.where = name, where
        self._run, self._deleted, self._reset = run, deleted_bytes, reset
        self._min, self._max = min_scrub_bytes, max_scrub_bytes
        self._rounds, self._settle = rounds, settle_seconds
        self._fulltext = fulltext
        #: What the last run did: text deleted before it, filler written per round (bytes),
        #: rounds, seconds.
        self.last: dict[str, float] = {}

    async def compact(self) -> None:
        began = time.monotonic()
        deleted = self._deleted()
        scrub = min(max(2 * deleted, self._min), self._max)
        if 2 * deleted > self._max:
            log.warning(
                "%s: %d bytes deleted since the last compaction; scrubbing %d per round "
                "(max_scrub_bytes): some freed records may keep their text until later writes",
                self.name,
                deleted,
                scrub,
            )
        await self._check_settings()
        await self._delete_filler()  # what a run cut short left
        nodes = -(-scrub // _NODE_BYTES)
        for _ in range(self._rounds):
            await asyncio.sleep(self._settle)
            await self._write_filler(nodes)
            await self._delete_filler()
        await asyncio.sleep(self._settle)  # the checkpoint that prunes the rotated logs
        left = await self._run(f"MATCH (f:{FILLER_LABEL}) RETURN count(f)", None)
        if left and left[0][0]:
            raise StoreError(f"{self.name}: {left[0][0]} filler nodes were left", store=self.name)
        self._reset(deleted)
        self.last = {
            "deleted_bytes": deleted,
            "scrub_bytes": nodes * _NODE_BYTES,
            "rounds": self._rounds,
            "seconds": round(time.monotonic() - began, 3),
        }
        log.info(
            "%s: compacted after a forget: %d bytes deleted, %d bytes of filler written and "
            "deleted %d times, in %.1f s",
            self.name,
            deleted,
            nodes * _NODE_BYTES,
            self._rounds,
            self.last["seconds"],
        )

    async def _write_filler(self, nodes: int) -> None:
        chunk = f"reduce(s = '', i IN range(1, {_CHUNK_UUIDS}) | s + randomUUID())"
        properties = [f"{key}: {chunk}" for key in _PROPERTIES]
        labels = FILLER_LABEL
        if self._fulltext is not None:  # documents for the full-text index too (see above)
            label, key = self._fulltext
            labels += f":{label}"
            properties.append(f"{key}: randomUUID() + ' ' + randomUUID()")
        for start in range(0, nodes, _BATCH_NODES):
            count = min(_BATCH_NODES, nodes - start)
            await self._run(
                f"UNWIND range(1, $count) AS n CREATE (:{labels} {{{', '.join(properties)}}})",
                {"count": count},
            )

    async def _delete_filler(self) -> None:
        while True:
            rows = await self._run(
                f"MATCH (f:{FILLER_LABEL}) WITH f LIMIT $batch DETACH DELETE f RETURN count(*)",
                {"batch": 4 * _BATCH_NODES},
            )
            if not rows or not rows[0][0]:
                return

    async def _check_settings(self) -> None:
        try:
            rows = await self._run(
                "SHOW SETTINGS YIELD name, value WHERE name IN $names RETURN name, value",
                {"names": sorted(WANTED_SETTINGS)},
            )
        except StoreError as exc:  # not allowed to read them: compact all the same
            log.info("%s: could not read the server's settings (%s)", self.name, exc.message)
            return
        found = {str(name): str(value).lower() for name, value in rows}
        wrong = {k: found.get(k) for k, v in WANTED_SETTINGS.items() if found.get(k) != v}
        if wrong:
            log.warning(
                "%s: the server keeps old transaction logs (%s): a forgotten user's text "
                "stays in them; see README.md, 'Neo4j and forget'",
                self.name,
                ", ".join(f"{k}={v}" for k, v in wrong.items()),
            )
