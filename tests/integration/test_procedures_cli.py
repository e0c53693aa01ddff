"""``memmachine procedures list|search|show`` as processes on a data dir: they show the named
project's procedures (one agent's and the shared ones with ``--agent-id``) with their
confidence, use counts and past versions, and nothing of another tenant."""

from __future__ import annotations

import json
from pathlib import Path

from memmachine import open_manager
from memmachine.ports.procedures import AppScope, ProcedureRecord
from tests.integration.test_jobs_cli import run_cli, settings

ACME = AppScope(tenant="acme", project_id="travel")


async def seed(data_dir: Path) -> str:
    """Acme's train procedure (used twice, then superseded), a planner-only one, and a
    procedure of another tenant; returns the train procedure's id."""
    async with open_manager(settings(data_dir)) as manager:
        procedural = manager.procedural_service
        train = await procedural.remember(
            ACME, ProcedureRecord(goal="Book a train ticket", steps=["Compare fares", "Pay"])
        )
        await procedural.report_use(ACME, train.id, success=True)
        await procedural.report_use(ACME, train.id, success=False)
        await procedural.remember(
            ACME,
            ProcedureRecord(
                goal="Book a train ticket",
                steps=["Compare fares", "Pick a seat", "Pay"],
                pitfalls=["Night trains sell out"],
            ),
        )
        await procedural.remember(
            ACME.model_copy(update={"agent_id": "planner"}),
            ProcedureRecord(goal="Plan a city walk", steps=["Pick three sights"]),
        )
        await procedural.remember(
            AppScope(tenant="globex", project_id="travel"),
            ProcedureRecord(goal="Book a train for globex", steps=["Call the agency"]),
        )
        return train.id


async def test_procedures_are_listed_searched_and_shown_per_project(tmp_path: Path) -> None:
    train = await seed(tmp_path)
    project = ["--tenant", "acme", "--project-id", "travel"]

    listed = run_cli(tmp_path, "procedures", "list", *project)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    assert any(line.startswith(f"{train}  conf ") and "v2" in line for line in lines)
    assert any("planner  Plan a city walk" in line for line in lines)
    assert "globex" not in listed.stdout

    shared = run_cli(tmp_path, "procedures", "list", *project, "--agent-id", "writer", "--json")
    assert shared.returncode == 0, shared.stderr
    assert [json.loads(line)["goal"] for line in shared.stdout.splitlines()] == [
        "Book a train ticket"
    ]

    found = run_cli(tmp_path, "procedures", "search", "train ticket", *project, "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert [hit["id"] for hit in hits] == [train]
    assert 0 < hits[0]["score"] <= 1

    shown = run_cli(tmp_path, "procedures", "show", train, *project)
    assert shown.returncode == 0, shown.stderr
    assert "  2. Pick a seat" in shown.stdout
    assert "  1. Night trains sell out" in shown.stdout
    assert "(superseded): conf" in shown.stdout
    assert "+1/-1, 2 steps" in shown.stdout  # the first version's uses, kept in its history

    elsewhere = run_cli(tmp_path, "procedures", "show", train, "--tenant", "globex")
    assert elsewhere.returncode == 1
    assert "not found" in elsewhere.stderr
    assert "Traceback" not in elsewhere.stderr
