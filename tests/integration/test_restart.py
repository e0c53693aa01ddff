"""The README's promise: run `memmachine serve`, store, stop, start again, find it again.

Run on the embedded defaults and on the production trio (Neo4j, PostgreSQL, Redis)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import shared_model_dir
from tests.integration.conftest import neo4j_settings, production_settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    def __init__(
        self, data_dir: Path, port: int, log: Path, stores: dict[str, str] | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMACHINE_")}
        env["MEMMACHINE_DATA_DIR"] = str(data_dir)
        env.update(stores or {})
        model = shared_model_dir()
        if model is not None:
            env["MEMMACHINE_EMBEDDING_MODEL"] = str(model)
        else:
            env["MEMMACHINE_EMBEDDING_PROVIDER"] = "none"
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memmachine_server.cli", "serve", "--port", str(port)],
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited early:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"server did not come up:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.fixture(params=["embedded", "neo4j+postgres+redis"])
def stores(request: pytest.FixtureRequest) -> dict[str, str]:
    """The server's store settings: none (embedded), or the production trio."""
    if request.param == "embedded":
        return {}
    return production_settings(
        neo4j_settings(request.getfixturevalue("neo4j_database")),
        request.getfixturevalue("postgres_database"),
        request.getfixturevalue("redis_keys"),
    )


def test_memories_survive_a_server_restart(
    tmp_path: Path, servers: list[Server], stores: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    log = tmp_path / "server.log"
    first = Server(data_dir, port, log, stores)
    servers.append(first)
    for user, text in [
        ("ann", "I keep my passport in the blue drawer"),
        ("ben", "My favourite band is Radiohead"),
    ]:
        response = httpx.post(
            first.url + "/v1/memories",
            json={
                "user_id": user,
                "session_id": "home",
                "messages": [{"content": text, "producer": user}],
            },
        )
        assert response.status_code == 201
    httpx.post(
        first.url + "/v1/profile",
        json={
            "user_id": "ann",
            "facts": [{"tag": "travel", "feature": "passport", "value": "blue drawer"}],
        },
    )
    httpx.put(
        first.url + "/v1/sessions/home/working", json={"user_id": "ann", "state": {"trip": "Rome"}}
    )
    first.stop()
    # uvicorn re-raises the SIGTERM it handled once shutdown is complete
    assert first.process.returncode in (0, -signal.SIGTERM), log.read_text()[-2000:]
    assert "Application shutdown complete" in log.read_text()
    # the embedded database child went away with the server
    pidfile = next(data_dir.rglob("*.pid"), None)
    if pidfile is not None and pidfile.read_text().strip():
        pid = int(pidfile.read_text().strip())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    second = Server(data_dir, port, log, stores)
    servers.append(second)
    query = "where is the passport" if shared_model_dir() else "passport"
    hits = httpx.post(
        second.url + "/v1/memories/search", json={"user_id": "ann", "query": query, "top_k": 1}
    ).json()
    assert [hit["content"] for hit in hits["episodic"]] == ["I keep my passport in the blue drawer"]
    assert [f["value"] for f in hits["profile"]] == ["blue drawer"]
    other = httpx.post(
        second.url + "/v1/memories/search", json={"user_id": "ben", "query": "passport"}
    ).json()
    assert all("passport" not in hit["content"] for hit in other["episodic"])
    working = httpx.get(second.url + "/v1/sessions/home/working", params={"user_id": "ann"}).json()
    assert working["state"] == {"trip": "Rome"}
    second.stop()
