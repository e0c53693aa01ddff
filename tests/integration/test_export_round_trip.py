"""Export -> forget -> import gives back what every store held, on the embedded stores and on
production ones (a FalkorDB server or Neo4j, PostgreSQL, Redis).

Each store is read directly (the episode, profile and working stores of the manager) before
the export and after the import, and the two readings must be equal: fact ids and every
time of a fact and its closed versions included. Only the time an episode was stored (its
``created_at``, the target store's own) and a fact's ``effective_confidence`` (aged from the
clock at read time) are left out.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memmachine import open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import FactRecord, NewMessage, Scope, WorkingMessage
from memmachine.portability import export_user, import_document, parse_document
from tests.conftest import Neo4jTarget
from tests.integration.conftest import PostgresDatabase, RedisKeys

START = datetime(2025, 5, 1, 8, 0, tzinfo=UTC)
Backend = Callable[[Path], dict[str, Any]]


async def snapshot(manager: MemoryManager, user: Scope) -> dict[str, Any]:
    """Everything each store holds for ``user``, minus what a store stamps itself."""
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
    return {}


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
        }
        if neo4j_database.password:
            found["episode_store_user"] = neo4j_database.user or "neo4j"
            found["episode_store_password"] = neo4j_database.password
        return found

    return values


@pytest.fixture(params=["embedded", "falkordb+postgres+redis", "neo4j+postgres+redis"])
async def manager(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryManager]:
    backend: Backend = {
        "embedded": lambda: embedded,
        "falkordb+postgres+redis": lambda: request.getfixturevalue("falkordb_postgres_redis"),
        "neo4j+postgres+redis": lambda: request.getfixturevalue("neo4j_postgres_redis"),
    }[request.param]()
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        startup_timeout_seconds=10,
        **backend(tmp_path),
    )
    async with open_manager(settings) as started:
        yield started


async def test_export_forget_import_restores_every_store(
    manager: MemoryManager, unique: str
) -> None:
    user = Scope(tenant=f"t{unique}", user_id="ana")
    await seed(manager, user)
    before = await snapshot(manager, user)
    assert [w["session_id"] for w in before["working"]] == ["scratch", "trip"]
    assert {(v["feature"], v["reason"]) for v in before["versions"]} == {
        ("next", "superseded"),
        ("gym", "quit the gym"),
        ("diet", "it ended"),
    }

    out = io.StringIO()
    await export_user(manager, user, out.write)
    document = parse_document(json.loads(out.getvalue()))
    assert document.version == 2
    await manager.forget_user(user)
    assert await snapshot(manager, user) == {
        "episodes": [],
        "facts": [],
        "versions": [],
        "working": [],
    }

    await import_document(manager, document)
    assert await snapshot(manager, user) == before

    # Importing the same document again changes nothing.
    await import_document(manager, document)
    assert await snapshot(manager, user) == before
