"""``memmachine jobs list`` and ``memmachine jobs purge-dead`` as processes on a data dir:
they see and purge only the named user's dead jobs, of the named tenant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from memmachine import open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.models import Scope

WALT = Scope(tenant="acme", user_id="walt")
OTHER_WALT = Scope(tenant="globex", user_id="walt")


def run_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMACHINE_", "OPENAI_"))}
    env.update({"MEMMACHINE_DATA_DIR": str(data_dir), "MEMMACHINE_EMBEDDING_PROVIDER": "none"})
    return subprocess.run(
        [sys.executable, "-m", "memmachine_server.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, embedding=EmbeddingSettings(provider="none"))


async def make_jobs(data_dir: Path) -> dict[str, str]:
    """Two dead jobs and a done one for acme's walt, a dead one for globex's walt."""
    ids: dict[str, str] = {}
    async with open_manager(settings(data_dir)) as manager:
        queue = manager.jobs
        assert queue is not None
        for name, scope, fails in (
            ("dead1", WALT, True),
            ("dead2", WALT, True),
            ("done", WALT, False),
            ("theirs", OTHER_WALT, True),
        ):
            job = await queue.enqueue(scope, "extract", {}, idempotency_key=name, max_attempts=1)
            claimed = await queue.claim("test", kinds=["extract"])
            assert claimed is not None
            assert claimed.id == job.id
            if fails:
                await queue.fail(job.id, "test", "the model answered nonsense")
            else:
                await queue.complete(job.id, "test")
            ids[name] = job.id
    return ids


async def statuses(data_dir: Path, ids: dict[str, str]) -> dict[str, str | None]:
    async with open_manager(settings(data_dir)) as manager:
        queue = manager.jobs
        assert queue is not None
        found: dict[str, str | None] = {}
        for name, job_id in ids.items():
            job = await queue.get(OTHER_WALT if name == "theirs" else WALT, job_id)
            found[name] = job.status if job else None
        return found


async def test_jobs_list_and_purge_dead_stay_within_the_user(tmp_path: Path) -> None:
    ids = await make_jobs(tmp_path)
    scope_flags = ["--user-id", "walt", "--tenant", "acme"]

    listed = run_cli(tmp_path, "jobs", "list", *scope_flags, "--status", "dead", "--json")
    assert listed.returncode == 0, listed.stderr
    dead = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {job["id"] for job in dead} == {ids["dead1"], ids["dead2"]}
    assert all(job["last_error"] == "the model answered nonsense" for job in dead)
    table = run_cli(tmp_path, "jobs", "list", *scope_flags)
    assert table.returncode == 0, table.stderr
    assert len(table.stdout.splitlines()) == 3
    assert f"{ids['done']}  done" in table.stdout

    refused = run_cli(tmp_path, "jobs", "purge-dead", *scope_flags, "--job-id", ids["theirs"])
    assert refused.returncode == 1
    assert "not found" in refused.stderr
    not_dead = run_cli(tmp_path, "jobs", "purge-dead", *scope_flags, "--job-id", ids["done"])
    assert not_dead.returncode == 1
    assert "only dead jobs can be purged" in not_dead.stderr

    one = run_cli(tmp_path, "jobs", "purge-dead", *scope_flags, "--job-id", ids["dead1"])
    assert one.returncode == 0, one.stderr
    assert one.stdout.strip() == "purged 1 dead job of user 'walt' (tenant 'acme')"
    rest = run_cli(tmp_path, "jobs", "purge-dead", *scope_flags)
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.strip() == "purged 1 dead job of user 'walt' (tenant 'acme')"

    assert await statuses(tmp_path, ids) == {
        "dead1": None,
        "dead2": None,
        "done": "done",
        "theirs": "dead",
    }
