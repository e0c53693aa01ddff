"""The Neo4j launcher the tests and benches start (tests/services.py) is ready only when the
attempt it started says so: a ``ready`` line an earlier, timed-out attempt left in the shared
log must not count, or the caller connects before the launcher has set the password and gets
``AuthError`` three times, then ``AuthenticationRateLimit`` (what stopped
``bench/many_users.py --production --graph neo4j`` twice on a loaded machine)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.services import Neo4jServer


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A port something listens on, as Bolt does before the password is set."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def launcher() -> Iterator[Neo4jServer]:
    """A Neo4jServer whose process is a stand-in that runs until stopped (no JVM)."""
    server = Neo4jServer()
    server.process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE
    )
    try:
        yield server
    finally:
        server.process.kill()
        server.process.wait()
        server.stop()


def test_an_earlier_attempts_ready_line_does_not_count(
    launcher: Neo4jServer, listening_port: int
) -> None:
    launcher.log.write_text("Exception: bind failed\nready\n")  # the earlier attempt's output
    since = launcher.log.stat().st_size
    launcher.port = listening_port

    assert not launcher._wait_ready(0.6, since=since)

    with launcher.log.open("a") as log:
        log.write("ready\n")  # this attempt: password set, Bolt up
    assert launcher._wait_ready(5.0, since=since)


def test_ready_needs_bolt_listening(launcher: Neo4jServer) -> None:
    launcher.log.write_text("ready\n")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        launcher.port = probe.getsockname()[1]  # bound, not listening
        assert not launcher._wait_ready(0.6, since=0)
