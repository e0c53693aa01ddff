"""``memmachine worker`` as a process: jobs queued while nothing runs are each done exactly
once across a SIGTERM and a restart of the worker; unreachable stores end it with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memmachine import open_manager
from memmachine.config import CompactionSettings, EmbeddingSettings, Settings
from memmachine.models import NewMessage, Scope
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import Reply, ScriptedChatServer

USER = Scope(tenant="default", user_id="walt")
SESSIONS = [f"s{n}" for n in range(5)]
GOOD = json.dumps({"text": "Walt talked about his garden.", "covered_ids": []})


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _env(data_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMACHINE_", "OPENAI_"))}
    env.update(
        {
            "MEMMACHINE_DATA_DIR": str(data_dir),
            "MEMMACHINE_EMBEDDING_PROVIDER": "none",
            "MEMMACHINE_JOBS_POLL_INTERVAL_SECONDS": "0.05",
            "MEMMACHINE_COMPACTION_KEEP_LAST_N": "2",
            **extra,
        }
    )
    return env


def _worker(
    data_dir: Path, extra: dict[str, str], log: Path, processes: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "memmachine_server.cli", "worker"],
            env=_env(data_dir, extra),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    processes.append(process)
    return process


def _until(check: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


async def test_jobs_are_done_once_across_a_worker_restart(
    tmp_path: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
    processes: list[subprocess.Popen[bytes]],
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        compaction=CompactionSettings(keep_last_n=2, trigger_messages=0),
    )
    async with open_manager(settings) as manager:  # no worker runs: jobs only queue
        for session in SESSIONS:
            scope = USER.model_copy(update={"session_id": session})
            await manager.add_messages(
                scope,
                [NewMessage(role="user", content=f"{session} garden note {n}") for n in range(5)],
            )
            await manager.enqueue_compaction(scope, force=True)

    llm_server.default = Reply(content=GOOD, delay=0.4)
    extra = {"MEMMACHINE_LLM_BASE_URL": llm_server.base_url, "MEMMACHINE_LLM_MODEL": "x"}
    log = tmp_path / "worker.log"
    first = _worker(tmp_path, extra, log, processes)
    _until(lambda: len(llm_server.requests) >= 2)
    first.send_signal(signal.SIGTERM)  # mid-way: a job is in hand
    assert first.wait(timeout=60) == 0, log.read_text()
    assert len(llm_server.requests) < len(SESSIONS)

    second = _worker(tmp_path, extra, log, processes)
    _until(lambda: len(llm_server.completions) >= len(SESSIONS))
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0, log.read_text()
    assert "Traceback" not in log.read_text()

    assert len(llm_server.requests) == len(SESSIONS)  # one summary per job, none twice
    async with open_manager(settings) as manager:
        assert manager.jobs is not None
        jobs = await manager.jobs.list_jobs(USER)
        assert sorted(job.scope.session_id or "" for job in jobs) == SESSIONS
        assert {(job.status, job.attempts) for job in jobs} == {("done", 1)}
        for session in SESSIONS:
            memory = await manager.get_working(USER.model_copy(update={"session_id": session}))
            assert memory.summary == "Walt talked about his garden."
            assert memory.message_count == 2


def test_unreachable_stores_end_the_worker_with_one_line(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "worker.log"
    process = _worker(
        tmp_path,
        {
            "MEMMACHINE_WORKING_STORE_URL": "redis://127.0.0.1:1/0",
            "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "0.5",
        },
        log,
        processes,
    )
    assert process.wait(timeout=60) == 1
    stderr = log.read_text()
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("memmachine: cannot start: working store at 127.0.0.1:1"), stderr
