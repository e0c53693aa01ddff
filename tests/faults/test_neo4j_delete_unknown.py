"""A Neo4j delete whose answer is lost: the server commits it, and the connection drops
before the client hears so (a loopback proxy, :class:`~tests.faults.harness.WireTap`, lets
the ``COMMIT`` through and cuts the connection when the server answers it).

What the caller must get (memmachine/errors.py): ``WriteOutcomeUnknownError``, a clear
message and no driver traceback; a delete is idempotent, so sending it again is safe and
answers "nothing left to delete". What the forget compaction must get
(neo4j_episode_store._unknown_counted): the delete did not report the text it took, so it
counts half the compactor's largest scrub, and the next compaction scrubs its most (never
too little) and then starts again from nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from memmachine.adapters.neo4j.neo4j_compactor import DEFAULT_MAX_SCRUB_BYTES
from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore
from memmachine.errors import WriteOutcomeUnknownError
from memmachine.models import EpisodeRecord, Scope
from tests.conftest import Neo4jTarget, empty_neo4j
from tests.faults.harness import WireTap

#: Bolt's COMMIT message as a chunk: size 2, a struct of no fields with signature 0x12,
#: the end-of-message marker.
BOLT_COMMIT = b"\x00\x02\xb0\x12\x00\x00"
KEEP = Scope(tenant="lost", org_id="o", project_id="p", user_id="u", session_id="keep")
FORGET = Scope(tenant="lost", org_id="o", project_id="p", user_id="u", session_id="forget")


def record(episode_id: str, text: str) -> EpisodeRecord:
    return EpisodeRecord(
        id=episode_id,
        role="user",
        producer=None,
        content=text,
        timestamp=datetime.now(UTC),
        search_text=text,
    )


@pytest.fixture
def neo4j(neo4j_target: Neo4jTarget) -> Iterator[Neo4jTarget]:
    empty_neo4j(neo4j_target)
    try:
        yield neo4j_target
    finally:
        empty_neo4j(neo4j_target)


def _port(target: Neo4jTarget) -> int:
    host, _, port = target.url.split("//", 1)[1].split("/", 1)[0].rpartition(":")
    if not target.url.startswith("bolt://") or host not in ("127.0.0.1", "localhost"):
        pytest.skip("the proxy needs the suite's own Neo4j on loopback (bolt://)")
    return int(port)


async def test_a_delete_whose_answer_is_lost(neo4j: Neo4jTarget) -> None:
    with WireTap(_port(neo4j)) as tap:
        store = Neo4jEpisodeStore(
            f"bolt://127.0.0.1:{tap.port}", user=neo4j.user, password=neo4j.password
        )
        await store.start()
        try:
            await store.add_episodes(KEEP, [record("k1", "the blue drawer")])
            await store.add_episodes(
                FORGET, [record(f"f{n}", f"the red drawer, turn {n}") for n in range(3)]
            )
            tap.lose_answer_to(BOLT_COMMIT)
            with pytest.raises(WriteOutcomeUnknownError) as info:
                await store.delete_episodes(FORGET)
            assert tap.answer_lost.is_set()
            error = info.value
            assert error.code == "write_outcome_unknown"
            assert error.store == "episodic"
            assert "unknown" in error.message
            assert "Traceback" not in error.message
            assert "neo4j." not in error.message

            # The server did commit it: the session's episodes are gone, the other's kept,
            # and sending the delete again (it is idempotent) finds nothing more to delete.
            assert await store.list_episodes(FORGET) == []
            assert await store.delete_episodes(FORGET) == 0
            assert [e.id for e in await store.list_episodes(KEEP)] == ["k1"]
            hits = await store.fulltext_search(KEEP.user_scope(), "drawer", 10)
            assert [e.id for e, _ in hits] == ["k1"]

            # The compaction scrubs as if the lost delete had taken half its largest scrub.
            compactor = store.compactor()
            await compactor.compact()
            assert compactor.last["deleted_bytes"] == DEFAULT_MAX_SCRUB_BYTES // 2
            assert compactor.last["scrub_bytes"] >= DEFAULT_MAX_SCRUB_BYTES
            await compactor.compact()  # and the next one starts from nothing
            assert compactor.last["deleted_bytes"] == 0
            assert [e.id for e in await store.list_episodes(KEEP)] == ["k1"]
        finally:
            await store.close()
            await asyncio.sleep(0)
