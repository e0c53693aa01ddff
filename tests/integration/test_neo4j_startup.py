"""Starting against Neo4j: a database still booting is waited for, a dead one is given up on
in one line, several servers create the schema at once, and /health shows Neo4j's version."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from neo4j import GraphDatabase

from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore
from memmachine.models import EpisodeRecord, Scope
from tests.conftest import Neo4jTarget
from tests.services import NEO4J_VERSION, Neo4jServer, free_port


def serve(data_dir: Path, env_extra: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMACHINE_")}
    env.update({"MEMMACHINE_DATA_DIR": str(data_dir), "MEMMACHINE_EMBEDDING_PROVIDER": "none"})
    env.update(env_extra)
    return subprocess.Popen(
        [sys.executable, "-m", "memmachine_server.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_waits_for_a_neo4j_that_is_still_starting(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], neo4j_target: Neo4jTarget
) -> None:
    """memmachine starts first (as in a compose file without health checks); Neo4j comes up
    on its port a few seconds later; the server then opens and reports Neo4j in /health."""
    late = Neo4jServer()
    bolt_port, http_port = free_port(), free_port()
    process = serve(
        tmp_path,
        {
            "MEMMACHINE_EPISODE_STORE_URL": f"bolt://127.0.0.1:{bolt_port}",
            "MEMMACHINE_EPISODE_STORE_PASSWORD": late.password,
            "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "240",
        },
        http_port,
    )
    processes.append(process)
    try:
        time.sleep(2)
        assert process.poll() is None, "serve gave up while the database was down"
        late.start(port=bolt_port)
        deadline = time.monotonic() + 120
        health = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=2).json()
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert health is not None, process.stderr.read().decode() if process.stderr else ""
        episodic = health["stores"]["episodic"]
        assert (episodic["kind"], episodic["status"]) == ("neo4j", "ok"), episodic
        assert NEO4J_VERSION in episodic["version"], episodic
        assert "community" in episodic["version"], episodic
        assert episodic["latency_ms"] > 0, episodic
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
        late.stop()
    log = err.decode()
    assert "is not reachable yet" in log, log
    assert "is up after" in log, log
    assert late.password not in log


def test_serve_gives_up_on_an_absent_neo4j_in_one_line(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    bolt_port = free_port()
    process = serve(
        tmp_path,
        {
            "MEMMACHINE_EPISODE_STORE_URL": f"neo4j://neo4j:s3cret-pw@127.0.0.1:{bolt_port}",
            "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "1.5",
        },
        free_port(),
    )
    processes.append(process)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    last = err.decode().strip().splitlines()[-1]
    assert last.startswith("memmachine: cannot start: episode store at "), last
    assert f"127.0.0.1:{bolt_port} is unreachable after" in last, last
    assert "s3cret-pw" not in err.decode()
    assert "Traceback" not in err.decode()


async def test_servers_starting_at_once_create_one_schema(neo4j_database: Neo4jTarget) -> None:
    """Four stores (as four replicas would) start on an empty database at the same moment:
    all start, each index and constraint exists once, and all see each other's writes. The
    vector index an earlier version created (which nothing reads, and every write paid
    for) is gone."""
    auth = (neo4j_database.user or "neo4j", neo4j_database.password)
    with GraphDatabase.driver(neo4j_database.url, auth=auth) as driver:
        driver.execute_query(
            "CREATE VECTOR INDEX episode_embedding IF NOT EXISTS FOR (n:Episode) "
            "ON (n.embedding) OPTIONS {indexConfig: {`vector.dimensions`: 8, "
            "`vector.similarity_function`: 'cosine'}}"
        )
    stores = [
        Neo4jEpisodeStore(
            neo4j_database.url,
            user=neo4j_database.user,
            password=neo4j_database.password,
            embedding_dimensions=8,
            embedding_model="startup-test",
        )
        for _ in range(4)
    ]
    await asyncio.gather(*(store.start() for store in stores))
    try:
        scope = Scope(tenant="t", org_id="o", project_id="p", user_id="u", session_id="s")
        for number, store in enumerate(stores):
            await store.add_episodes(
                scope,
                [
                    EpisodeRecord(
                        id=f"e{number}",
                        role="user",
                        producer=None,
                        content=f"note {number}",
                        timestamp=datetime.now(UTC),
                        search_text=f"note {number}",
                        embedding=[1.0, *[0.0] * 7],
                    )
                ],
            )
        for store in stores:
            assert await store.count_episodes(scope) == 4
    finally:
        await asyncio.gather(*(store.close() for store in stores))
    with GraphDatabase.driver(neo4j_database.url, auth=auth) as driver:
        indexes = [r["name"] for r in driver.execute_query("SHOW INDEXES YIELD name").records]
        constraints = [
            r["name"] for r in driver.execute_query("SHOW CONSTRAINTS YIELD name").records
        ]
        [meta] = driver.execute_query("MATCH (m:MemMachineMeta) RETURN count(m) AS n").records
    assert len(indexes) == len(set(indexes))
    assert {"episode_terms", "episode_user_id"} <= set(indexes)
    assert "episode_embedding" not in indexes  # nothing would read it
    assert len(constraints) == len(set(constraints)) == 4
    assert meta["n"] == 1


async def test_queries_put_no_warning_in_the_log(
    neo4j_database: Neo4jTarget, caplog: pytest.LogCaptureFixture
) -> None:
    """Episodes without agent_id or group_id (the common case) must not make Neo4j warn
    about an unknown property key on every list and search."""
    store = Neo4jEpisodeStore(
        neo4j_database.url, user=neo4j_database.user, password=neo4j_database.password
    )
    await store.start()
    try:
        scope = Scope(tenant="t", org_id="o", project_id="p", user_id="u", session_id="s")
        await store.add_episodes(
            scope,
            [
                EpisodeRecord(
                    id="only",
                    role="user",
                    producer=None,
                    content="the blue drawer",
                    timestamp=datetime.now(UTC),
                    search_text="the blue drawer",
                )
            ],
        )
        caplog.clear()
        with caplog.at_level("INFO", logger="neo4j"):
            assert [e.id for e in await store.list_episodes(scope)] == ["only"]
            assert [e.id for e, _ in await store.fulltext_search(scope, "drawer", 5)] == ["only"]
        assert [r.getMessage()[:120] for r in caplog.records if r.name.startswith("neo4j")] == []
    finally:
        await store.close()
