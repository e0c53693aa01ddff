"""PII in every string field of the write routes that test_pii_scan.py does not walk, then a
scan of every store's raw bytes, on the embedded stores and on the production servers.

The routes: an idempotent add (its kept answer), messages appended to working memory
directly, nested message metadata, a custom-type record, a procedure (goal, steps,
preconditions, pitfalls), an attachment's caption and file name, and a session outcome.
Each field gets its own e-mail address or phone number, so a leak names its field. With
redaction on (the default) none of them may reach a store: every file of the data dir and
of the servers' directories (append-only files, snapshots, PostgreSQL's heap and WAL) and
every key and value the Redis-protocol servers hold is read, as text and as base64.
Control words written beside each address must be found, which proves the scan reads
where the data is. The production walk runs twice: episodes on a FalkorDB server, and on
Neo4j (its whole home scanned).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings
from memmachine_server.app import create_app
from tests.faults.conftest import Report
from tests.faults.test_forget_scan import (  # noqa: F401  (the fixtures)
    READING_LIST,
    found_in,
    neo4j_forget,
    neo4j_scan,
    neo4j_settings,
    production,
    production_scan,
    production_settings,
    raw_bytes,
)
from tests.integration.test_write_path_safety import dump_redis
from tests.server.conftest import LOCAL, make_settings
from tests.services import Neo4jServer

PHONE = "+44 20 7946 0958"
#: One address (or phone number) per stored field, so a leak names its field.
PLANTED = {
    "idempotent.content": "idem-content.leak@example.com",
    "working.message": "working-message.leak@example.com",
    "metadata.nested": "metadata-nested.leak@example.com",
    "custom.title": "custom-title.leak@example.com",
    "custom.note": "custom-note.leak@example.com",
    "procedure.goal": "procedure-goal.leak@example.com",
    "procedure.step": "procedure-step.leak@example.com",
    "procedure.precondition": "procedure-pre.leak@example.com",
    "procedure.pitfall": PHONE,
    "attachment.caption": "attachment-caption.leak@example.com",
    "attachment.name": "attachment-name.leak@example.com",
}
#: Written beside the addresses; each must be found in some store.
CONTROLS = ("ctl-idempotent", "ctl-working", "ctl-metadata", "ctl-custom", "ctl-procedure")


def walk(api: TestClient) -> None:
    user, pii = "walker", PLANTED
    body = {
        "user_id": user,
        "session_id": "s1",
        "messages": [
            {
                "content": f"ctl-idempotent mail {pii['idempotent.content']}",
                "metadata": {"deep": {"deeper": [f"ctl-metadata {pii['metadata.nested']}"]}},
            }
        ],
    }
    for _ in range(2):  # the second answer comes from the kept record
        added = api.post("/v1/memories", json=body, headers={"Idempotency-Key": "walk-1"})
        assert added.status_code == 201, added.text
        assert pii["idempotent.content"] not in added.text
    appended = api.post(
        "/v1/sessions/s1/working/messages",
        json={
            "user_id": user,
            "messages": [{"role": "user", "content": f"ctl-working {pii['working.message']}"}],
        },
    )
    assert appended.status_code == 200, appended.text
    keyed = api.post(  # a title is the record's key: personal data there is refused
        "/v1/memory-types/reading_list/store",
        json={"user_id": user, "input": {"title": f"to {pii['custom.title']}"}},
    )
    assert keyed.status_code == 422, keyed.text
    assert keyed.json()["error"]["field"] == "records.0.key"
    custom = api.post(
        "/v1/memory-types/reading_list/store",
        json={
            "user_id": user,
            "input": {"title": "Dune", "note": f"ctl-custom lent by {pii['custom.note']}"},
        },
    )
    assert custom.status_code == 200, custom.text
    procedure = api.post(
        "/v1/procedures",
        json={
            "goal": f"ctl-procedure reply to {pii['procedure.goal']}",
            "steps": [f"write to {pii['procedure.step']}"],
            "preconditions": [f"know {pii['procedure.precondition']}"],
            "pitfalls": [f"never call {pii['procedure.pitfall']}"],
        },
    )
    assert procedure.status_code == 201, procedure.text
    document = base64.b64encode(b"a plain note").decode()
    attachment = {
        "data_uri": f"data:text/plain;base64,{document}",
        "name": f"{pii['attachment.name']}.txt",
        "caption": f"sent by {pii['attachment.caption']}",
    }
    attached = api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": "s2",
            "messages": [{"content": "see", "attachments": [attachment]}],
        },
    )
    assert attached.status_code == 201, attached.text
    outcome = api.post("/v1/sessions/s1/outcome", json={"user_id": user, "outcome": "success"})
    assert outcome.status_code in (200, 201), outcome.text


def scan_and_count(scan: Callable[[], bytes], tally: Report, case: str) -> None:
    haystack = scan()
    leaked = sorted(field for field, value in PLANTED.items() if found_in(haystack, value))
    seen = [control for control in CONTROLS if found_in(haystack, control)]
    tally(case=case, fields=len(PLANTED), leaked=len(leaked), controls_found=len(seen))
    assert leaked == []
    assert seen == list(CONTROLS)


def test_no_planted_pii_in_the_embedded_stores(tmp_path: Path, tally: Report) -> None:
    data_dir = (tmp_path / "data").resolve()
    settings = make_settings(
        data_dir, memory_types=[READING_LIST], embedding=EmbeddingSettings(provider="none")
    )
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as api:
        walk(api)
        keys = dump_redis(data_dir).encode()  # while the embedded server runs
    # after shutdown, when the embedded server has written its files
    scan_and_count(lambda: raw_bytes(data_dir) + keys, tally, "PII route walk, embedded stores")


def test_no_planted_pii_in_the_production_stores(
    tmp_path: Path,
    production: dict[str, Any],  # noqa: F811
    tally: Report,
) -> None:
    data_dir = (tmp_path / "data").resolve()
    settings = production_settings(
        data_dir, production, embedding=EmbeddingSettings(provider="none")
    )
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as api:
        walk(api)
    scan = production_scan(tmp_path, settings, production)
    scan_and_count(scan, tally, "PII route walk, FalkorDB + Redis + PostgreSQL")


def test_no_planted_pii_in_neo4j_and_the_production_stores(
    tmp_path: Path,
    production: dict[str, Any],  # noqa: F811
    neo4j_forget: Neo4jServer,  # noqa: F811
    tally: Report,
) -> None:
    """The same walk with the episodes on Neo4j: its whole home (store files, transaction
    logs, full-text index files) and every node are scanned too."""
    data_dir = (tmp_path / "data").resolve()
    settings = production_settings(
        data_dir,
        production,
        embedding=EmbeddingSettings(provider="none"),
        **neo4j_settings(neo4j_forget),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as api:
        walk(api)
    others = production_scan(tmp_path, settings, production)
    # the episodes' text is in Neo4j's files: the scan of them can find a leak
    assert found_in(neo4j_scan(neo4j_forget), "ctl-metadata")
    scan_and_count(
        lambda: others() + neo4j_scan(neo4j_forget),
        tally,
        "PII route walk, Neo4j + Redis + PostgreSQL",
    )
