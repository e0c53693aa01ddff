"""Tools the fault cases share: freezing a process, counting what a client sends to a server
(a loopback TCP proxy between the two), ``memmachine serve`` as a process to kill, a load of
adds through the SDK that keeps what each client was told, and the audit that reads the
stores back and counts what was lost, duplicated or invented."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from memmachine_sdk import Client
from tests.services import (
    Neo4jServer,
    PostgresServer,
    ToolMissingError,
    die_with_parent,
    free_port,
)

__all__ = [
    "AddLoad",
    "Audit",
    "FactLoad",
    "Outcomes",
    "ServerProcess",
    "WireTap",
    "audit",
    "audit_facts",
    "frozen",
    "own_neo4j",
    "postgres_processes",
]


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """``SIGSTOP`` the process for the block, ``SIGCONT`` it after (also on failure)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def own_neo4j() -> Iterator[Neo4jServer]:
    """A Neo4j server of the test's own (freezing or killing it stops nothing else), woken
    and stopped at the end; without Java or Maven the test is skipped."""
    server = Neo4jServer()
    try:
        server.start()
    except ToolMissingError as exc:
        server.stop()
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


def postgres_processes(postgres: PostgresServer) -> list[int]:
    """The postmaster and its children (a backend per connection, the background workers):
    freezing only the postmaster would leave the open connections answering."""
    assert postgres.process is not None
    pid = postgres.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


class WireTap:
    """A TCP proxy on a free port of 127.0.0.1 in front of ``127.0.0.1:target_port`` that
    keeps what clients send, so a test can count how often a command went out
    (:meth:`count`) however the server fared, and can lose the server's answer to one
    message (:meth:`lose_answer_to`). Used as a context manager."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sent: list[bytearray] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()
        self._lose: bytes | None = None
        #: Set once an answer was lost and its connection cut (:meth:`lose_answer_to`).
        self.answer_lost = threading.Event()

    def lose_answer_to(self, message: bytes) -> None:
        """Once: the next time a client sends ``message`` it reaches the server, and the
        server's answer is thrown away and the connection cut (both ways) when it comes, so
        the client sees its connection drop after the server did what it asked."""
        with self._lock:
            self._lose = message
        self.answer_lost.clear()

    def __enter__(self) -> WireTap:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()
                continue
            sent = bytearray()
            with self._lock:
                self._sent.append(sent)
                self._sockets += [client, server]
            muted = threading.Event()  # the server's next answer on this connection is lost
            for source, sink, kept in ((client, server, sent), (server, client, None)):
                threading.Thread(
                    target=self._pump, args=(source, sink, kept, muted), daemon=True
                ).start()

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        kept: bytearray | None,
        muted: threading.Event,
    ) -> None:
        try:
            while chunk := source.recv(65536):
                if kept is None and muted.is_set():
                    self.answer_lost.set()
                    return  # the answer goes nowhere; ``finally`` cuts both ways
                if kept is not None:
                    with self._lock:
                        kept.extend(chunk)
                        if self._lose is not None and self._lose in chunk:
                            self._lose = None
                            muted.set()  # before it is sent: the answer cannot come first
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def count(self, marker: str) -> int:
        """How many times clients sent ``marker`` (over all their connections)."""
        needle = marker.encode()
        with self._lock:
            return sum(bytes(sent).count(needle) for sent in self._sent)


# ---------------------------------------------------------------------- a server process


class ServerProcess:
    """``memmachine serve`` as a child process on a free loopback port, configured only by
    ``env`` (``MEMMACHINE_*`` of the test's environment left out), its output in ``log``.
    :meth:`start` returns once ``/health`` answers; :meth:`kill` is ``kill -9``."""

    def __init__(self, env: dict[str, str], log: Path, *, port: int | None = None) -> None:
        self.port = port if port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._env = {
            **{
                key: value
                for key, value in os.environ.items()
                if not key.startswith("MEMMACHINE_") and key != "OPENAI_API_KEY"
            },
            "MEMMACHINE_EMBEDDING_PROVIDER": "none",
            "MEMMACHINE_COMPACTION_TRIGGER_MESSAGES": "0",
            "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "60",
            "MEMMACHINE_JOBS_IN_PROCESS_WORKER": "false",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> ServerProcess:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "memmachine_server.cli", "serve", "--port", str(self.port)],
                env=self._env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not come up:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """``kill -9`` the server and wait for it (its embedded store, if any, stays up until
        it notices: it is started with a parent-death signal)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


# ---------------------------------------------------------------------- load and audit


@dataclass
class Outcomes:
    """What the clients were told, per message content."""

    acknowledged: set[str] = field(default_factory=set)
    #: Refused with certainty that nothing was applied (4xx, 503, a connection never made).
    refused: set[str] = field(default_factory=set)
    #: No answer, or an answer that leaves it open (504 outcome unknown, a timeout...).
    unknown: set[str] = field(default_factory=set)


class AddLoad:
    """``writers`` threads adding one message at a time through the SDK (default retry
    policy, as an application would) to sessions of their own under ``user``, each message
    a unique content, until :meth:`stop`. The outcome of every add is kept."""

    def __init__(self, url: str, user: str, *, writers: int = 4, timeout: float = 10.0) -> None:
        self.url = url
        self.user = user
        self.outcomes = Outcomes()
        self._writers = writers
        self._timeout = timeout
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sent = 0

    def __enter__(self) -> AddLoad:
        for number in range(self._writers):
            thread = threading.Thread(target=self._write, args=(number,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    @property
    def acknowledged(self) -> int:
        with self._lock:
            return len(self.outcomes.acknowledged)

    def wait_for(self, acknowledged: int, timeout: float = 60.0) -> None:
        """Return once at least ``acknowledged`` adds were confirmed."""
        deadline = time.monotonic() + timeout
        while self.acknowledged < acknowledged:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.acknowledged} adds confirmed in {timeout} s")
            time.sleep(0.05)

    def _send(self, client: Client, number: int, content: str) -> None:
        client.add([content], user_id=self.user, session_id=f"s{number}")

    def _write(self, number: int) -> None:
        from memmachine_sdk import (
            MemMachineConnectionError,
            MemMachineError,
            ServerError,
            ServiceUnavailableError,
        )

        with Client(self.url, timeout=self._timeout) as client:
            index = 0
            while not self._stop.is_set():
                content = f"{self.user} writer {number} message {index}"
                index += 1
                try:
                    self._send(client, number, content)
                except ServiceUnavailableError:
                    kind = "refused"  # 503: nothing applied
                except MemMachineConnectionError as exc:
                    kind = "unknown" if exc.request_sent else "refused"
                except ServerError:
                    kind = "unknown"  # 504 outcome unknown, or any other 5xx
                except MemMachineError:
                    kind = "refused"  # 4xx
                else:
                    kind = "acknowledged"
                with self._lock:
                    getattr(self.outcomes, kind).add(content)
                if kind != "acknowledged":
                    time.sleep(0.05)  # the server is down: do not spin


class FactLoad(AddLoad):
    """Like :class:`AddLoad`, but each write upserts a profile fact of its own (tag
    ``load``, the content as feature and value)."""

    def _send(self, client: Client, number: int, content: str) -> None:
        client.set_profile(
            [{"tag": "load", "feature": content, "value": content}], user_id=self.user
        )


@dataclass(frozen=True)
class Audit:
    """What the stores hold for the load's user, counted against the outcomes."""

    acknowledged: int
    stored: int
    lost: int
    duplicated: int
    unknown: int
    invented: int
    unknown_stored: int
    working_lost: int
    working_duplicated: int


def audit(url: str, user: str, outcomes: Outcomes) -> Audit:
    """Read every episode and every working memory of ``user`` back over REST and count:
    acknowledged adds not stored (``lost``), contents stored twice (``duplicated``), adds
    refused with certainty yet stored (``invented``), and the same for working memory."""
    episodes: Counter[str] = Counter()
    working: Counter[str] = Counter()
    with Client(url, timeout=30) as client:
        offset = 0
        while True:
            page = client.list_episodes(user_id=user, limit=1000, offset=offset)
            episodes.update(episode.content for episode in page.episodes)
            offset += len(page.episodes)
            if not page.episodes or offset >= page.total:
                break
        sessions = {content.split(" message ")[0].split(" writer ")[1] for content in episodes}
        sessions |= {
            content.split(" message ")[0].split(" writer ")[1] for content in outcomes.acknowledged
        }
        for number in sessions:
            memory = client.get_working(f"s{number}", user_id=user)
            working.update(message.content for message in memory.messages)
    return _counted(outcomes, episodes, working)


def audit_facts(url: str, user: str, outcomes: Outcomes) -> Audit:
    """:func:`audit` for a :class:`FactLoad`: the user's profile facts read back."""
    with Client(url, timeout=30) as client:
        facts = client.get_profile(user_id=user)
    return _counted(outcomes, Counter(fact.feature for fact in facts), None)


def _counted(outcomes: Outcomes, stored: Counter[str], working: Counter[str] | None) -> Audit:
    """The audit of what is ``stored`` (and in ``working`` memory) against ``outcomes``."""
    acknowledged = outcomes.acknowledged
    return Audit(
        acknowledged=len(acknowledged),
        stored=len(stored),
        lost=sum(content not in stored for content in acknowledged),
        duplicated=sum(count > 1 for count in stored.values()),
        unknown=len(outcomes.unknown),
        invented=sum(content in stored for content in outcomes.refused),
        unknown_stored=sum(content in stored for content in outcomes.unknown),
        working_lost=0 if working is None else sum(c not in working for c in acknowledged),
        working_duplicated=0 if working is None else sum(n > 1 for n in working.values()),
    )
