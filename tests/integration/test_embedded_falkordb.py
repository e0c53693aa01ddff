"""The embedded FalkorDB child process: lifecycle, durability, recovery and ownership."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from memmachine.adapters.falkordb.embedded_falkordb import (
    MAX_SOCKET_PATH_BYTES,
    EmbeddedFalkorDBServer,
)
from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.errors import ConfigurationError, StoreUnavailableError
from memmachine.models import EpisodeRecord, Scope
from tests.conftest import REPO_ROOT

T0 = datetime(2024, 1, 1, tzinfo=UTC)

#: A script that owns a server in its own process, prints the child's pid and waits.
OWNER_SCRIPT = """
import asyncio, sys
from pathlib import Path
import redis.asyncio as aioredis
from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.errors import ConfigurationError

async def main() -> None:
    server = EmbeddedFalkorDBServer(Path(sys.argv[1]))
    try:
        await server.start()
    except ConfigurationError as exc:
        print("refused:", exc, flush=True)
        return
    client = aioredis.Redis(unix_socket_path=str(server.socket_path))
    await client.execute_command("GRAPH.QUERY", "g", "CREATE (:Marker {value: 'from-owner'})")
    print(server.pid, flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state not in ("Z", "X")


async def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def query(server: EmbeddedFalkorDBServer, cypher: str) -> list[list[object]]:
    client = aioredis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
    try:
        reply = await client.execute_command("GRAPH.QUERY", "g", cypher)
    finally:
        await client.aclose()
    return list(reply[1]) if len(reply) == 3 else []


async def markers(server: EmbeddedFalkorDBServer) -> list[object]:
    rows = await query(server, "MATCH (m:Marker) RETURN m.value ORDER BY m.value")
    return [row[0] for row in rows]


def spawn_owner(data_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def spawn_unowned(server: EmbeddedFalkorDBServer) -> subprocess.Popen[bytes]:
    """The server's exact command line, run as if its owner had crashed (no parent-death
    signal, no lock held)."""
    return subprocess.Popen(server.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
async def data_dir(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "data"
    yield path
    # belt and braces: never leave a server behind, whatever the test did
    pidfile = path / "falkordb" / "falkordb.pid"
    if pidfile.exists():
        pid = int(pidfile.read_text().strip() or 0)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- lifecycle


async def test_start_serves_a_private_socket_and_close_stops_it(data_dir: Path) -> None:
    server = EmbeddedFalkorDBServer(data_dir)
    assert server.url == f"unix://{server.socket_path}"
    await server.start()
    pid = server.pid
    assert pid is not None
    assert alive(pid)
    try:
        assert server.socket_path.is_socket()
        assert stat.S_IMODE(server.socket_path.stat().st_mode) == 0o700
        assert (data_dir / "falkordb" / "appendonlydir").is_dir()
        health = await server.health()
        assert health.status == "ok"
        assert health.version is not None
        assert "FalkorDB" in health.version
        client = aioredis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
        info = await client.info("server")
        await client.aclose()
        assert int(info["tcp_port"]) == 0
        await server.start()  # already started: nothing happens
        assert server.pid == pid
    finally:
        await server.close()
    assert not alive(pid)
    assert not server.socket_path.exists()
    await server.close()
    assert (await server.health()).status == "down"


async def test_data_survives_close_and_start(data_dir: Path) -> None:
    async with EmbeddedFalkorDBServer(data_dir) as server:
        await query(server, "CREATE (:Marker {value: 'kept'})")
    async with EmbeddedFalkorDBServer(data_dir) as server:
        assert await markers(server) == ["kept"]


async def test_a_stale_socket_file_is_replaced(data_dir: Path) -> None:
    server = EmbeddedFalkorDBServer(data_dir)
    server.socket_path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as stale:  # bound, never listening, left behind
        stale.bind(str(server.socket_path))
    (data_dir / "falkordb" / "falkordb.pid").write_text("999999\n")
    async with server:
        assert (await server.health()).status == "ok"


async def test_a_killed_child_is_recovered_with_its_data(data_dir: Path) -> None:
    server = EmbeddedFalkorDBServer(data_dir)
    await server.start()
    await query(server, "CREATE (:Marker {value: 'before-crash'})")
    await asyncio.sleep(1.1)  # past the one-second fsync window
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert await wait_gone(pid)
    assert (await server.health()).status == "down"
    await server.close()

    async with EmbeddedFalkorDBServer(data_dir) as again:
        assert await markers(again) == ["before-crash"]


async def test_a_server_left_by_a_crashed_owner_is_replaced(data_dir: Path) -> None:
    server = EmbeddedFalkorDBServer(data_dir)
    (data_dir / "falkordb").mkdir(parents=True)
    leftover = spawn_unowned(server)
    try:
        for _ in range(250):
            if server.socket_path.exists():
                try:
                    await query(server, "CREATE (:Marker {value: 'left-behind'})")
                    break
                except OSError:
                    pass
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the leftover server never answered")
        async with server:
            assert server.pid != leftover.pid
            assert leftover.wait(timeout=10) == 0  # asked to shut down, not killed
            assert await markers(server) == ["left-behind"]
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()


async def test_a_second_owner_is_refused(data_dir: Path) -> None:
    first = EmbeddedFalkorDBServer(data_dir)
    await first.start()
    try:
        with pytest.raises(ConfigurationError, match=str(data_dir)):
            await EmbeddedFalkorDBServer(data_dir).start()
        other = spawn_owner(data_dir)
        out, err = other.communicate(timeout=30)
        assert out.startswith("refused:"), err
        assert str(data_dir) in out
        assert (await first.health()).status == "ok"
    finally:
        await first.close()
    async with EmbeddedFalkorDBServer(data_dir) as second:
        assert (await second.health()).status == "ok"


async def test_the_child_dies_with_its_owner(data_dir: Path) -> None:
    owner = spawn_owner(data_dir)
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(owner.stdout.readline), 30)
        assert line.strip().isdigit(), owner.stderr.read() if owner.stderr else ""
        child = int(line)
        assert alive(child)
        owner.kill()  # SIGKILL: the owner gets no chance to clean up
        owner.wait()
        assert await wait_gone(child, 5.0)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    async with EmbeddedFalkorDBServer(data_dir) as server:
        assert await markers(server) == ["from-owner"]


async def test_the_child_dies_with_its_owner_even_when_its_data_dir_is_gone(
    data_dir: Path,
) -> None:
    """A deleted data dir makes redis's final save fail; it must still exit with its owner
    (this once left an orphan behind after a test run's temp dirs were cleaned up)."""
    owner = spawn_owner(data_dir)
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(owner.stdout.readline), 30)
        assert line.strip().isdigit(), owner.stderr.read() if owner.stderr else ""
        child = int(line)
        shutil.rmtree(data_dir)
        owner.kill()
        owner.wait()
        assert await wait_gone(child, 5.0)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


async def test_a_long_data_dir_gets_a_short_private_socket(tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 60) / ("e" * 60) / "data"
    server = EmbeddedFalkorDBServer(data_dir)
    assert len(os.fsencode(data_dir / "falkordb" / "falkordb.sock")) > MAX_SOCKET_PATH_BYTES
    assert len(os.fsencode(server.socket_path)) <= MAX_SOCKET_PATH_BYTES
    async with server:
        assert stat.S_IMODE(server.socket_path.parent.stat().st_mode) == 0o700
        await query(server, "CREATE (:Marker {value: 'long'})")
    assert (data_dir / "falkordb" / "appendonlydir").is_dir()
    async with EmbeddedFalkorDBServer(data_dir) as again:
        assert again.socket_path == server.socket_path
        assert await markers(again) == ["long"]


async def test_a_child_that_cannot_start_reports_its_log(data_dir: Path) -> None:
    home = data_dir / "falkordb"
    home.mkdir(parents=True)
    (home / "appendonlydir").write_text("not a directory")
    server = EmbeddedFalkorDBServer(data_dir, startup_timeout=10)
    with pytest.raises(StoreUnavailableError) as caught:
        await server.start()
    assert "exited" in caught.value.message
    assert "append" in caught.value.message.lower()  # the log tail says why
    (home / "appendonlydir").unlink()
    async with server:  # nothing was left locked or running
        assert (await server.health()).status == "ok"


# ---------------------------------------------------------------------- with the episode store


async def test_the_store_reports_a_dead_server_and_recovers(data_dir: Path) -> None:
    scope = Scope(user_id="ann", session_id="s1")
    episode = EpisodeRecord(
        id="e1", role="user", producer=None, content="hi", timestamp=T0, search_text="hi"
    )
    server = EmbeddedFalkorDBServer(data_dir)
    await server.start()
    store = FalkorDBEpisodeStore(server.url, graph_name="episodes")
    await store.start()
    try:
        await store.add_episodes(scope, [episode])
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert await wait_gone(pid)
        with pytest.raises(StoreUnavailableError) as caught:
            await store.count_episodes(scope)
        assert caught.value.store == "episodic"
        assert (await store.health()).status == "down"

        await server.start()  # the dead child is replaced
        assert await store.count_episodes(scope) == 1
        assert (await store.health()).status == "ok"
    finally:
        await store.close()
        await server.close()


async def test_episodes_form_a_next_chain_in_session_order(data_dir: Path) -> None:
    scope = Scope(user_id="ann", session_id="s1")

    def episode(episode_id: str) -> EpisodeRecord:
        return EpisodeRecord(
            id=episode_id, role="user", producer=None, content="", timestamp=T0, search_text=""
        )

    async def chain(server: EmbeddedFalkorDBServer) -> list[tuple[object, object]]:
        client = aioredis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
        reply = await client.execute_command(
            "GRAPH.RO_QUERY",
            "episodes",
            "MATCH (a:Episode)-[:NEXT]->(b:Episode) RETURN a.id, b.id ORDER BY a.sequence",
        )
        await client.aclose()
        return [(a, b) for a, b in reply[1]]

    server = EmbeddedFalkorDBServer(data_dir)
    async with server, FalkorDBEpisodeStore(server.url, graph_name="episodes") as store:
        await store.add_episodes(scope, [episode("a"), episode("b")])
        await store.add_episodes(scope, [episode("c"), episode("d")])
        assert await chain(server) == [("a", "b"), ("b", "c"), ("c", "d")]
        await store.delete_episode(scope, "b")
        await store.delete_episode(scope, "d")
        assert await chain(server) == [("a", "c")]
        await store.add_episodes(scope, [episode("e")])
        assert await chain(server) == [("a", "c"), ("c", "e")]
