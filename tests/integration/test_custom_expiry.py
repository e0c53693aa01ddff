"""Custom-type records that expire (embedded stores, a clock the test moves): a record
stored with ``ttl_seconds`` or ``expires_at`` is retrieved until that instant and never
after, through REST and the SDK; the retention sweep then erases it from the record
backend, in every scope (partitioned ones too)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

from memmachine_sdk import Client
from tests.fakes.clock import ManualClock
from tests.integration.test_expiry import manager_of, start

TYPES = [
    "examples.custom_memory_type:ReadingList",
    "tests.unit.memory.test_memory_types:SessionNotes",
]
SECRET = "one-time-vault-code-6613"


def _notes(api: object, user: str, session: str) -> list[str]:
    found = api.post(  # type: ignore[attr-defined]
        "/v1/memory-types/session_notes/retrieve",
        json={"user_id": user, "session_id": session, "input": {}},
    )
    assert found.status_code == 200, found.text
    return list(found.json()["result"])


def test_an_expiring_custom_record_is_read_until_its_instant_then_erased(tmp_path: Path) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    api = start(data_dir, clock, memory_types=TYPES)
    try:
        note = {"key": "vault", "text": SECRET}
        stored = api.post(
            "/v1/memory-types/session_notes/store",
            json={"user_id": "cu", "session_id": "s1", "input": note, "ttl_seconds": 5},
        )
        assert stored.status_code == 200, stored.text
        kept = {"key": "kept", "text": "water the plants"}
        ends = (clock.now() + timedelta(seconds=60)).isoformat()
        later = api.post(
            "/v1/memory-types/session_notes/store",
            json={"user_id": "cu", "session_id": "s2", "input": kept, "expires_at": ends},
        )
        assert later.status_code == 200, later.text
        assert _notes(api, "cu", "s1") == [SECRET]

        clock.advance(5)
        assert _notes(api, "cu", "s1") == []
        assert _notes(api, "cu", "s2") == ["water the plants"]
        report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
        assert report.custom_records_expired == 1
        with sqlite3.connect(data_dir / "memory_types.db") as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows = repr(db.execute("SELECT * FROM agent_state").fetchall())
        assert SECRET not in rows
        assert "water the plants" in rows

        clock.advance(60)
        assert _notes(api, "cu", "s2") == []
        again = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
        assert again.custom_records_expired == 1
    finally:
        api.__exit__(None, None, None)


def test_expiry_input_of_a_custom_store_is_checked_and_named(tmp_path: Path) -> None:
    clock = ManualClock()
    api = start((tmp_path / "data").resolve(), clock, memory_types=TYPES)
    try:
        body = {"user_id": "cu", "input": {"title": "Dune"}}
        both = {**body, "ttl_seconds": 5, "expires_at": (clock.now().isoformat())}
        refused = api.post("/v1/memory-types/reading_list/store", json=both)
        assert refused.status_code == 422
        assert "ttl_seconds" in refused.text
        past = {**body, "expires_at": (clock.now() - timedelta(seconds=1)).isoformat()}
        refused = api.post("/v1/memory-types/reading_list/store", json=past)
        assert refused.status_code == 422
        assert "expires_at" in refused.text
        found = api.post("/v1/memory-types/reading_list/retrieve", json={"user_id": "cu"})
        assert found.json()["result"] == []  # nothing half-stored
    finally:
        api.__exit__(None, None, None)


def test_the_sdk_stores_expiring_records(tmp_path: Path) -> None:
    clock = ManualClock()
    api = start((tmp_path / "data").resolve(), clock, memory_types=TYPES)
    try:
        client = Client(http_client=api)
        client.store_custom(
            "reading_list", {"title": "Ephemeral Book"}, user_id="sdk", ttl_seconds=5
        )
        read = client.retrieve_custom("reading_list", {}, user_id="sdk")
        assert [book["title"] for book in read] == ["Ephemeral Book"]
        clock.advance(5)
        assert client.retrieve_custom("reading_list", {}, user_id="sdk") == []
    finally:
        api.__exit__(None, None, None)
