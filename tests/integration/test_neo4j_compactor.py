"""The Neo4j compactor's filler never shows up: a run cut short leaves filler nodes (an
``Episode`` label, no tenant), and a store still starts, lists, counts and searches as if
they were not there; the next run deletes them. A server that keeps old transaction logs
is named in the log; a delete whose answer is lost is counted as a large one. (That the
compaction takes a forgotten user's text out of Neo4j's files is
tests/faults/test_forget_scan.py.)"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from neo4j import GraphDatabase

from memmachine.adapters.neo4j.neo4j_compactor import DEFAULT_MAX_SCRUB_BYTES, FILLER_LABEL
from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore
from memmachine.errors import WriteOutcomeUnknownError
from memmachine.models import EpisodeRecord, ProjectScope, Scope
from tests.conftest import Neo4jTarget
from tests.faults.harness import WireTap

#: Bolt's COMMIT message as a chunk: size 2, a struct of no fields with signature 0x12,
#: the end-of-message marker.
BOLT_COMMIT = b"\x00\x02\xb0\x12\x00\x00"


def record(episode_id: str, text: str) -> EpisodeRecord:
    return EpisodeRecord(
        id=episode_id,
        role="user",
        producer=None,
        content=text,
        timestamp=datetime.now(UTC),
        search_text=text,
    )


def count(target: Neo4jTarget, cypher: str) -> int:
    auth = (target.user or "neo4j", target.password) if target.password else None
    with GraphDatabase.driver(target.url, auth=auth) as driver:
        return int(driver.execute_query(cypher).records[0][0])


async def test_filler_left_by_a_cut_short_run_is_invisible_and_deleted_by_the_next(
    neo4j_database: Neo4jTarget, caplog: pytest.LogCaptureFixture
) -> None:
    target = neo4j_database
    # what a compaction cut short leaves: indexed filler without a tenant
    auth = (target.user or "neo4j", target.password) if target.password else None
    with GraphDatabase.driver(target.url, auth=auth) as driver:
        driver.execute_query(
            f"UNWIND range(1, 5) AS n CREATE (:{FILLER_LABEL}:Episode "
            "{search_terms: ' drawer ', a: 'filler text'})"
        )
    store = Neo4jEpisodeStore(target.url, user=target.user, password=target.password)
    await store.start()  # builds ledgers and re-analyses terms: filler is skipped by both
    try:
        scope = Scope(tenant="t", org_id="o", project_id="p", user_id="u", session_id="s")
        await store.add_episodes(
            scope, [record("keep", "the blue drawer"), record("drop", "the red drawer")]
        )
        assert [e.id for e in await store.list_episodes(scope)] == ["keep", "drop"]
        assert sorted(e.id for e, _ in await store.fulltext_search(scope, "drawer", 10)) == [
            "drop",
            "keep",
        ]
        users = await store.list_users(ProjectScope(tenant="t", org_id="o", project_id="p"))
        assert [u.user_id for u in users] == ["u"]
        assert count(target, "MATCH (l:UserLedger) WHERE l.tenant IS NULL RETURN count(l)") == 0

        assert await store.delete_episode(scope, "drop") is True
        compactor = store.compactor()
        with caplog.at_level(logging.WARNING, logger="memmachine.adapters.neo4j"):
            await compactor.compact()
        # the session's server keeps its logs (no forget settings): said, not hidden
        assert any("keeps old transaction logs" in r.getMessage() for r in caplog.records)
        assert count(target, f"MATCH (f:{FILLER_LABEL}) RETURN count(f)") == 0
        assert compactor.last["deleted_bytes"] >= len("the red drawer")
        assert compactor.last["scrub_bytes"] >= 1 << 20
        assert [e.id for e in await store.list_episodes(scope)] == ["keep"]
        # a second run finds nothing deleted since the first
        await compactor.compact()
        assert compactor.last["deleted_bytes"] == 0
    finally:
        await store.close()


def text_chars(target: Neo4jTarget, ids: list[str]) -> int:
    """Every character of every string property of the episodes ``ids``, read apart from the
    store (the text a compaction must scrub)."""
    auth = (target.user or "neo4j", target.password) if target.password else None
    with GraphDatabase.driver(target.url, auth=auth) as driver:
        rows = driver.execute_query(
            "MATCH (e:Episode) WHERE e.id IN $ids AND e.tenant = 'sized' RETURN properties(e)",
            ids=ids,
        ).records
    assert len(rows) == len(ids)
    return sum(len(v) for row in rows for v in row[0].values() if isinstance(v, str))


async def test_the_compaction_is_sized_by_every_character_the_deletes_took(
    neo4j_database: Neo4jTarget,
) -> None:
    target = neo4j_database
    store = Neo4jEpisodeStore(target.url, user=target.user, password=target.password)
    await store.start()
    try:
        one = Scope(tenant="sized", org_id="o", project_id="p", user_id="u", session_id="s1")
        other = Scope(tenant="sized", org_id="o", project_id="p", user_id="u", session_id="s2")
        await store.add_episodes(one, [record("a", "the red drawer"), record("b", "a blue box")])
        await store.add_episodes(
            other, [record(f"c{n}", f"turn {n} of the other session " * n) for n in range(1, 4)]
        )
        taken = text_chars(target, ["a"]) + text_chars(target, ["c1", "c2", "c3"])
        assert taken > len("the red drawer") + 3 * len("turn 1 of the other session ")

        assert await store.delete_episode(one, "a") is True
        assert await store.delete_episode(one, "a") is False  # gone: nothing more counted
        assert await store.delete_episodes(other) == 3
        compactor = store.compactor()
        await compactor.compact()
        assert compactor.last["deleted_bytes"] == taken
        assert [e.id for e in await store.list_episodes(one)] == ["b"]
    finally:
        await store.close()


KEEP = Scope(tenant="lost", org_id="o", project_id="p", user_id="u", session_id="keep")
FORGET = Scope(tenant="lost", org_id="o", project_id="p", user_id="u", session_id="forget")


def _port(target: Neo4jTarget) -> int:
    host, _, port = target.url.split("//", 1)[1].split("/", 1)[0].rpartition(":")
    if not target.url.startswith("bolt://") or host not in ("127.0.0.1", "localhost"):
        pytest.skip("the proxy needs the suite's own Neo4j on loopback (bolt://)")
    return int(port)


async def test_a_delete_whose_answer_is_lost_is_counted_as_a_large_one(
    neo4j_database: Neo4jTarget,
) -> None:
    """The server commits the delete and the connection drops before the client hears so
    (the proxy lets Bolt's ``COMMIT`` through and cuts the connection when the server
    answers). The caller gets ``WriteOutcomeUnknownError`` (memmachine/errors.py), a clear
    message and no driver traceback; a delete is idempotent, so sending it again is safe
    and finds nothing more. The delete did not report the text it took, so it counts half
    the compactor's largest scrub: the next compaction scrubs its most (never too little)
    and the one after starts again from nothing."""
    neo4j = neo4j_database
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
