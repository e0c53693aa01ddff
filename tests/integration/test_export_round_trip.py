"""Export -> forget -> import gives back what every store held, on the embedded stores and on
production ones (a FalkorDB server or Neo4j, PostgreSQL, Redis).

Each store is read directly (the episode, profile and working stores of the manager, the
typed agent state backend, the custom memory types' backend, the blob store and the
procedure store) before the export and after the import, and the two readings must be
equal: fact ids and every time of a fact and its closed versions included. Only the time an
episode was stored (its ``created_at``, the target store's own), a fact's
``effective_confidence`` (aged from the clock at read time) and a procedure's ids and times
(the target's own) are left out.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from memmachine import open_manager
from memmachine.agent_state import AgentStateStore, StateBackend
from memmachine.bootstrap import build_attachments, build_state_backend
from memmachine.config import EmbeddingSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.memory.attachments import AttachedMessage, AttachmentInput
from memmachine.models import Episode, FactRecord, NewMessage, Scope, WorkingMessage
from memmachine.portability import export_user, import_document, parse_document
from memmachine.ports import ATTACHMENT_KEY
from memmachine.ports.procedures import AppScope, ProcedureRecord, ProcedureSource
from tests.conftest import Neo4jTarget
from tests.integration.conftest import PostgresDatabase, RedisKeys

START = datetime(2025, 5, 1, 8, 0, tzinfo=UTC)
Backend = Callable[[Path], dict[str, Any]]
TYPES = [
    "examples.custom_memory_type:ReadingList",
    "tests.unit.memory.test_memory_types:SessionNotes",
]
PLAN = "Day 1: Lima centre\nDay 2: Barranco 🌊\n".encode()


class TripState(BaseModel):
    stops: list[str] = []
    budget: Decimal = Decimal("0")
    since: date | None = None


@dataclass
class Setup:
    """A started manager and the typed-state backend its user's agent keeps state in."""

    manager: MemoryManager
    state: StateBackend
    settings: Settings


async def snapshot(setup: Setup, user: Scope) -> dict[str, Any]:
    """Everything each store holds for ``user``, minus what a store stamps itself."""
    manager = setup.manager
    found = await snapshot_memories(manager, user)
    episodes, _ = await manager.list_episodes(user, limit=1000)
    blobs = manager.episodic_service.blobs
    assert blobs is not None
    found["blobs"] = {
        "count": await blobs.count(user),
        "bytes": sorted(
            [
                (episode.id, b"".join([c async for c in blobs.read(user, sha)]).decode())
                for episode, sha in attached(episodes)
            ]
        ),
    }
    # (on Redis the custom types' records share the backend: they are listed below)
    found["agent_state"] = [
        (r.scope.model_dump(), r.name, r.envelope)
        for r in await setup.state.list_user(user)
        if not r.name.startswith("memory_type.")
    ]
    found["custom_records"] = [
        (r.scope.model_dump(), r.name, r.envelope)
        for r in await manager.memory_types.list_user(user)
    ]
    app = AppScope.of(user)
    procedures = []
    for procedure in await manager.procedural_service.list_procedures(app):
        _, history = await manager.procedural_service.history(app, procedure.id)
        procedures.append(
            {
                **procedure.model_dump(mode="json", exclude={"id", "created_at", "updated_at"}),
                "history": [
                    v.model_dump(mode="json", exclude={"procedure_id", "valid_from", "valid_to"})
                    for v in history
                ],
            }
        )
    found["procedures"] = sorted(procedures, key=lambda p: str(p["goal"]))
    return found


def attached(episodes: list[Episode]) -> list[tuple[Episode, str]]:
    found = []
    for episode in episodes:
        link = episode.metadata.get(ATTACHMENT_KEY)
        if isinstance(link, dict):
            found.append((episode, str(link["sha256"])))
    return found


async def snapshot_memories(manager: MemoryManager, user: Scope) -> dict[str, Any]:
    """What the episode, profile and working stores hold for ``user``."""
    episodes, _ = await manager.list_episodes(user, limit=1000)
    facts = await manager.profile.list_facts(user)
    versions = await manager.profile.list_fact_versions(user)
    sessions = await manager.working.list_sessions(user)
    return {
        "episodes": sorted(
            (e.model_dump(mode="json", exclude={"created_at"}) for e in episodes),
            key=lambda e: (e["scope"]["session_id"], e["sequence"]),
        ),
        "facts": [
            f.model_dump(
                mode="json",
                exclude={"effective_confidence"},
            )
            for f in facts
        ],
        "versions": [v.model_dump(mode="json") for v in versions],
        "working": sorted(
            (
                {
                    "session_id": w.scope.session_id,
                    "messages": [m.model_dump(mode="json") for m in w.messages],
                    "state": w.state,
                    "summary": w.summary,
                }
                for w in sessions
            ),
            key=lambda w: str(w["session_id"]),
        ),
    }


async def seed_more(setup: Setup, user: Scope) -> None:
    """Typed agent state, custom-type records, an attachment and procedures."""
    manager = setup.manager
    trip = user.for_session("trip")
    states = AgentStateStore(TripState, setup.state)
    await states.save_state(
        trip.model_copy(update={"agent_id": "coach"}),
        TripState(stops=["Lima", "Cusco"], budget=Decimal("950.50"), since=date(2025, 5, 1)),
    )
    await states.save_state(user, TripState(stops=["Quito"]))
    await manager.memory_types.store("reading_list", trip, {"title": "Dune", "author": "Herbert"})
    await manager.memory_types.store("reading_list", user, {"title": "Ficciones"})
    await manager.memory_types.store("session_notes", trip, {"key": "pack", "text": "sunscreen"})
    attachments = build_attachments(setup.settings, manager)

    async def store(planned: list[NewMessage], ids: list[str]) -> list[Episode]:
        return await manager.add_messages(trip, planned, ids=ids)

    given = AttachmentInput(data=PLAN, mime="text/plain", name="plan.txt")
    await attachments.add(trip, [AttachedMessage(NewMessage(content="my plan"), [given])], store)
    await attachments.close()

    app = AppScope.of(user)
    procedural = manager.procedural_service
    book = ProcedureRecord(
        goal="Book a flight",
        steps=["Search fares", "Pay"],
        sources=[ProcedureSource(user_id="ana", session_id="trip")],
    )
    first = await procedural.remember(app, book)
    await procedural.report_use(app, first.id, success=True)
    better = book.model_copy(update={"steps": ["Search fares", "Check bags", "Pay"]})
    second = await procedural.remember(app, better)
    await procedural.report_use(app, second.id, success=False)
    await procedural.report_use(app, second.id, success=True)
    await procedural.remember(
        app.model_copy(update={"agent_id": "coach"}),
        ProcedureRecord(goal="Plan a workout", steps=["Warm up"], pitfalls=["Skipping rest"]),
    )


async def forget_everything(setup: Setup, user: Scope) -> None:
    """Forget the user, their typed state, and the project's procedures (as a new
    deployment would start)."""
    await setup.manager.forget_user(user)
    await setup.state.delete_user(user)
    app = AppScope.of(user)
    procedural = setup.manager.procedural_service
    for procedure in await procedural.list_procedures(app):
        await procedural.delete(app, procedure.id)


async def seed(manager: MemoryManager, user: Scope) -> None:
    await manager.add_messages(
        user.for_session("trip"),
        [
            NewMessage(content="We fly to Lima in June", producer="Ana", timestamp=START),
            NewMessage(
                role="assistant",
                content="Noted: Lima in June",
                timestamp=START + timedelta(minutes=1),
                metadata={"channel": "app", "turn": 2},
            ),
        ],
    )
    await manager.add_messages(
        user.model_copy(update={"session_id": "work", "agent_id": "coach", "group_id": "team"}),
        [NewMessage(content="My manager is Ruth", timestamp=START - timedelta(days=2))],
        working=False,
    )
    # A superseded value, an invalidated-only fact, one invalidated then set again.
    await manager.set_facts(user, [FactRecord(tag="travel", feature="next", value="Quito")])
    await manager.set_facts(user, [FactRecord(tag="travel", feature="next", value="Lima")])
    (gym,) = await manager.set_facts(user, [FactRecord(tag="habits", feature="gym", value="Mon")])
    await manager.invalidate_fact(user, gym.id, "quit the gym")
    (diet,) = await manager.set_facts(user, [FactRecord(tag="food", feature="diet", value="vegan")])
    await manager.invalidate_fact(user, diet.id, "it ended")
    await manager.set_facts(
        user.model_copy(update={"agent_id": "coach"}),
        [
            FactRecord(
                tag="food",
                feature="diet",
                value="pescatarian",
                confidence=0.6,
                source="user-implicit",
                source_episode_ids=["ep-x"],
                metadata={"why": "said fish twice"},
            )
        ],
    )
    await manager.put_working(user.for_session("trip"), state={"step": 2}, summary="Lima trip")
    # A session that lives only in working memory.
    await manager.put_working(
        user.for_session("scratch"),
        messages=[WorkingMessage(role="user", content="draft packing list", timestamp=START)],
        state={"items": ["hat"]},
    )


def embedded(tmp_path: Path) -> dict[str, Any]:
    return {"memory_types_store": "sqlite"}


@pytest.fixture
def falkordb_postgres_redis(
    falkordb_server_url: str, postgres_database: PostgresDatabase, redis_keys: RedisKeys
) -> Backend:
    def values(tmp_path: Path) -> dict[str, Any]:
        return {
            "episode_store_url": falkordb_server_url.replace("redis://", "falkordb://", 1),
            "profile_store_url": postgres_database.url,
            "working_store_url": redis_keys.url,
            "working_key_prefix": redis_keys.prefix,
            "memory_types_store": "redis",
        }

    return values


@pytest.fixture
def neo4j_postgres_redis(
    neo4j_database: Neo4jTarget, postgres_database: PostgresDatabase, redis_keys: RedisKeys
) -> Backend:
    def values(tmp_path: Path) -> dict[str, Any]:
        found: dict[str, Any] = {
            "episode_store_url": neo4j_database.url,
            "profile_store_url": postgres_database.url,
            "working_store_url": redis_keys.url,
            "working_key_prefix": redis_keys.prefix,
            "memory_types_store": "redis",
        }
        if neo4j_database.password:
            found["episode_store_user"] = neo4j_database.user or "neo4j"
            found["episode_store_password"] = neo4j_database.password
        return found

    return values


@pytest.fixture(params=["embedded", "falkordb+postgres+redis", "neo4j+postgres+redis"])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Setup]:
    backend: Backend = {
        "embedded": lambda: embedded,
        "falkordb+postgres+redis": lambda: request.getfixturevalue("falkordb_postgres_redis"),
        "neo4j+postgres+redis": lambda: request.getfixturevalue("neo4j_postgres_redis"),
    }[request.param]()
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        startup_timeout_seconds=10,
        memory_types=TYPES,
        **backend(tmp_path),
    )
    # Typed state in SQLite beside the embedded stores, in the working store's Redis beside
    # the production ones.
    kind = "sqlite" if request.param == "embedded" else "redis"
    async with open_manager(settings) as started:
        state = build_state_backend(settings, kind)
        await state.start()
        try:
            yield Setup(started, state, settings)
        finally:
            await state.close()


async def test_export_forget_import_restores_every_store(setup: Setup, unique: str) -> None:
    manager = setup.manager
    user = Scope(tenant=f"t{unique}", user_id="ana")
    await seed(manager, user)
    await seed_more(setup, user)
    before = await snapshot(setup, user)
    assert [w["session_id"] for w in before["working"]] == ["scratch", "trip"]
    assert {(v["feature"], v["reason"]) for v in before["versions"]} == {
        ("next", "superseded"),
        ("gym", "quit the gym"),
        ("diet", "it ended"),
    }
    assert before["blobs"]["count"] == 1
    assert [text for _, text in before["blobs"]["bytes"]] == [PLAN.decode()]
    assert [(scope["agent_id"], name) for scope, name, _ in before["agent_state"]] == [
        (None, "TripState"),
        ("coach", "TripState"),
    ]
    # the reading list is one per user; the notes are kept per session
    assert [(scope["session_id"], name) for scope, name, _ in before["custom_records"]] == [
        (None, "memory_type.reading_list"),
        ("trip", "memory_type.session_notes"),
    ]
    assert len(before["custom_records"][0][2]["data"]["records"]) == 2
    flight, workout = before["procedures"]
    assert (flight["version"], flight["successes"], flight["failures"]) == (2, 1, 1)
    assert [v["successes"] for v in flight["history"]] == [1]
    assert workout["agent_id"] == "coach"

    out = io.StringIO()
    report = await export_user(manager, user, out.write, state=setup.state, procedures=True)
    assert (report.agent_states, report.custom_spaces, report.attachments) == (2, 2, 1)
    assert report.procedures == 2
    document = parse_document(json.loads(out.getvalue()))
    assert document.version == 3
    await forget_everything(setup, user)
    emptied = await snapshot(setup, user)
    assert emptied == {
        "episodes": [],
        "facts": [],
        "versions": [],
        "working": [],
        "blobs": {"count": 0, "bytes": []},
        "agent_state": [],
        "custom_records": [],
        "procedures": [],
    }

    imported = await import_document(manager, document, state=setup.state)
    assert (imported.agent_states, imported.custom_spaces, imported.attachments) == (2, 2, 1)
    assert imported.procedures == 2
    assert await snapshot(setup, user) == before

    # Importing the same document again changes nothing.
    again = await import_document(manager, document, state=setup.state)
    assert (again.agent_states, again.custom_spaces, again.procedures) == (0, 0, 0)
    assert await snapshot(setup, user) == before
