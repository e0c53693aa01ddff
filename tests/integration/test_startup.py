"""Startup against stores that are down, or not up yet: bounded retries with backoff, one
clear error naming the store and its host:port, and nothing left running or connected."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memmachine.bootstrap import open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.errors import StoreUnavailableError
from tests.services import RedisServer, free_port

PASSWORD = "hunter2-not-for-logs"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); count it as gone
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def embedded_pid(data_dir: Path) -> int | None:
    pidfile = data_dir / "falkordb" / "falkordb.pid"
    if pidfile.is_file() and pidfile.read_text().strip():
        return int(pidfile.read_text().strip())
    return None


def settings_for(data_dir: Path, **values: object) -> Settings:
    return Settings(
        data_dir=data_dir,
        embedding=EmbeddingSettings(provider="none"),
        **values,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- in process


async def test_an_unreachable_store_fails_after_the_timeout_naming_store_and_host(
    tmp_path: Path,
) -> None:
    port = free_port()
    settings = settings_for(
        tmp_path,
        episode_store_url=f"falkordb://:{PASSWORD}@127.0.0.1:{port}",
        working_store_url=f"redis://127.0.0.1:{free_port()}/0",
        startup_timeout_seconds=1.0,
        startup_backoff_base_seconds=0.1,
        startup_backoff_max_seconds=0.3,
    )
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        async with open_manager(settings):
            pytest.fail("started against a port where nothing listens")
    elapsed = time.monotonic() - began
    message = caught.value.message
    assert message.startswith(f"episode store at 127.0.0.1:{port} is unreachable after ")
    assert PASSWORD not in message
    assert caught.value.store == "episodic"
    assert 0.9 < elapsed < 10, elapsed
    # neither store needed the embedded server, so none was started
    assert not (tmp_path / "falkordb").exists()


async def test_giving_up_closes_the_parts_already_started(tmp_path: Path) -> None:
    """The embedded server, the episode store and the profile store start; the working
    store never does: afterwards the embedded child is gone and the data dir unlocked."""
    port = free_port()
    settings = settings_for(
        tmp_path,
        working_store_url=f"redis://:{PASSWORD}@127.0.0.1:{port}/0",
        startup_timeout_seconds=0.5,
        startup_backoff_base_seconds=0.1,
    )
    with pytest.raises(StoreUnavailableError, match=rf"working store at 127\.0\.0\.1:{port}"):
        async with open_manager(settings):
            pytest.fail("started without its working store")
    pid = embedded_pid(tmp_path)
    assert pid is None or not pid_alive(pid)
    # the embedded server can be started again at once: nothing holds the data directory
    async with open_manager(settings_for(tmp_path)) as manager:
        assert (await manager.health()).status == "ok"


async def test_a_store_that_comes_up_late_is_waited_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    redis: RedisServer | None = None

    missed = asyncio.Event()

    class OnRetry(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "is not reachable yet" in record.getMessage():
                missed.set()

    async def start_later() -> None:
        """Start Redis a second after the manager first found it missing."""
        nonlocal redis
        await missed.wait()
        await asyncio.sleep(1.0)
        redis = RedisServer(tmp_path / "redis", port, password=PASSWORD)

    settings = settings_for(
        tmp_path / "data",
        working_store_url=f"redis://127.0.0.1:{port}/0",
        working_store_password=PASSWORD,
        startup_timeout_seconds=20,
        startup_backoff_base_seconds=0.1,
        startup_backoff_max_seconds=0.5,
    )
    later = asyncio.create_task(start_later())
    caplog.set_level(logging.INFO, logger="memmachine.bootstrap")
    handler = OnRetry()
    logging.getLogger("memmachine.bootstrap").addHandler(handler)
    try:
        began = time.monotonic()
        async with open_manager(settings) as manager:
            assert redis is not None
            assert time.monotonic() - began >= 1.0
            health = await manager.health()
            assert health.stores["working"].status == "ok"
            assert health.stores["working"].version
        assert any("is not reachable yet" in r.getMessage() for r in caplog.records)
        assert any("is up after" in r.getMessage() for r in caplog.records)
        assert all(PASSWORD not in r.getMessage() for r in caplog.records)
    finally:
        logging.getLogger("memmachine.bootstrap").removeHandler(handler)
        later.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await later
        if redis is not None:
            redis.stop()


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def serve(
    data_dir: Path, env_extra: dict[str, str], processes: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMACHINE_")}
    env.update({"MEMMACHINE_DATA_DIR": str(data_dir), "MEMMACHINE_EMBEDDING_PROVIDER": "none"})
    env.update(env_extra)
    process = subprocess.Popen(
        [sys.executable, "-m", "memmachine_server.cli", "serve", "--port", str(free_port())],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    processes.append(process)
    return process


def test_serve_prints_one_clear_line_and_exits_non_zero(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    process = serve(
        tmp_path,
        {
            "MEMMACHINE_EPISODE_STORE_URL": f"falkordb://127.0.0.1:{free_port()}",
            "MEMMACHINE_WORKING_STORE_URL": f"redis://:{PASSWORD}@127.0.0.1:{port}/0",
            "MEMMACHINE_EPISODE_STORE_PASSWORD": PASSWORD,
            "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "0.5",
        },
        processes,
    )
    _, err = process.communicate(timeout=60)
    stderr = err.decode()
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert PASSWORD not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("memmachine: cannot start: episode store at 127.0.0.1:"), stderr
    assert "is unreachable after" in last


def test_serve_refuses_bad_settings_in_one_line(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    process = serve(tmp_path, {"MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "-1"}, processes)
    _, err = process.communicate(timeout=60)
    stderr = err.decode()
    assert process.returncode == 1
    assert stderr.strip().splitlines() == [
        "memmachine: cannot start: invalid setting MEMMACHINE_STARTUP_TIMEOUT_SECONDS: "
        "Input should be greater than or equal to 0"
    ]


def test_sigterm_while_waiting_for_a_store_leaves_no_child(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    process = serve(
        tmp_path,
        {
            "MEMMACHINE_WORKING_STORE_URL": f"redis://127.0.0.1:{free_port()}/0",
            "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "120",
        },
        processes,
    )
    assert process.stderr is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"is not reachable yet" not in seen:
        assert time.monotonic() < deadline, seen.decode()
        line = process.stderr.readline()
        assert line, seen.decode()
        seen += line
    pid = embedded_pid(tmp_path)
    assert pid is not None
    assert pid_alive(pid)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM
    assert not pid_alive(pid)
