"""Facts keep their provenance honestly when memories expire (embedded stores, a clock the
test moves): a fact whose source episodes the sweep removed stays, its provenance saying
"expired" instead of naming episodes that no longer exist; and a value that expired is
never read back from a fact's history, even when a new value replaced it before the sweep,
which then erases it."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

from memmachine.models import EXPIRED_SOURCE, FactRecord, NewMessage, Scope
from memmachine.portability import import_document, parse_document
from tests.fakes.clock import ManualClock
from tests.integration.test_expiry import export_text, manager_of, raw_files, start

OLD_CODE = "door-code-old-7719"


def test_a_fact_whose_sources_expired_says_so_and_is_kept(tmp_path: Path) -> None:
    clock = ManualClock()
    api = start((tmp_path / "data").resolve(), clock)
    try:
        manager = manager_of(api)
        user = Scope(user_id="prov", session_id="s1")
        said = [
            NewMessage(content="I adopted a beagle called Toast", ttl_seconds=5),
            NewMessage(content="Toast is three years old"),
        ]
        added = api.portal.call(manager.add_messages, user, said)  # type: ignore[union-attr]
        expiring, kept = (episode.id for episode in added)
        record = FactRecord(
            tag="pets", feature="dog", value="beagle Toast", source_episode_ids=[expiring, kept]
        )
        [fact] = api.portal.call(manager.set_facts, user, [record])  # type: ignore[union-attr]
        clock.advance(5)

        report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
        assert report.episodes_expired == 1
        assert report.fact_sources_expired == 1
        shown = api.get(f"/v1/profile/facts/{fact.id}", params={"user_id": "prov"})
        assert shown.status_code == 200, shown.text
        # The fact stays, with no dangling id: the one source left and the marker.
        assert shown.json()["value"] == "beagle Toast"
        assert shown.json()["source_episode_ids"] == [kept, EXPIRED_SOURCE]
        assert shown.json()["confidence"] == fact.confidence
        assert expiring not in export_text(api, "prov")
    finally:
        api.__exit__(None, None, None)


def test_an_expired_value_replaced_before_the_sweep_is_not_read_from_the_history(
    tmp_path: Path,
) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    api = start(data_dir, clock)
    try:
        ends = (clock.now() + timedelta(seconds=5)).isoformat()
        first = {"tag": "access", "feature": "door", "value": OLD_CODE, "expires_at": ends}
        put = api.post("/v1/profile", json={"user_id": "hist", "facts": [first]})
        assert put.status_code in (200, 201), put.text
        clock.advance(2)
        new = {"tag": "access", "feature": "door", "value": "door-code-new-1200"}
        replaced = api.post("/v1/profile", json={"user_id": "hist", "facts": [new]})
        assert replaced.status_code in (200, 201), replaced.text
        history = {"user_id": "hist", "tag": "access", "feature": "door"}
        before = api.get("/v1/profile/history", params=history)
        assert OLD_CODE in before.text  # still valid: read until its expiry
        assert before.json()["history"][0]["expires_at"] is not None

        clock.advance(3)
        after = api.get("/v1/profile/history", params=history)
        assert after.status_code == 200, after.text
        assert after.json()["history"] == []
        assert after.json()["current"]["value"] == "door-code-new-1200"
        assert OLD_CODE not in export_text(api, "hist")

        report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
        assert report.fact_versions_expired == 1
        assert report.facts_expired == 0
        with sqlite3.connect(data_dir / "profile.db") as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows = db.execute("SELECT * FROM profile_fact_history").fetchall()
        assert OLD_CODE not in json.dumps(rows, default=str)
        assert OLD_CODE not in raw_files(data_dir)
    finally:
        api.__exit__(None, None, None)


def test_an_exported_version_keeps_its_expiry_through_forget_and_import(tmp_path: Path) -> None:
    """Export -> forget -> import keeps when each closed value expires: the imported
    history shows it until that instant and not after, as the original did."""
    clock = ManualClock()
    api = start((tmp_path / "data").resolve(), clock)
    try:
        ends = clock.now() + timedelta(seconds=10)
        first = {
            "tag": "access",
            "feature": "gate",
            "value": OLD_CODE,
            "expires_at": ends.isoformat(),
        }
        assert api.post("/v1/profile", json={"user_id": "move", "facts": [first]}).is_success
        new = {"tag": "access", "feature": "gate", "value": "gate-code-new-3300"}
        assert api.post("/v1/profile", json={"user_id": "move", "facts": [new]}).is_success
        document = parse_document(json.loads(export_text(api, "move")))
        assert api.delete("/v1/users/move").is_success
        manager = manager_of(api)
        api.portal.call(import_document, manager, document)  # type: ignore[union-attr]

        history = {"user_id": "move", "tag": "access", "feature": "gate"}
        imported = api.get("/v1/profile/history", params=history).json()
        assert [old["value"] for old in imported["history"]] == [OLD_CODE]
        assert imported["history"][0]["expires_at"] == ends.isoformat().replace("+00:00", "Z")
        clock.advance(10)
        assert api.get("/v1/profile/history", params=history).json()["history"] == []
    finally:
        api.__exit__(None, None, None)
