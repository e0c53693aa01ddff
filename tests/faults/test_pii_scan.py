"""PII planted in every string field a write stores, then a scan of the stores' raw bytes.

An app on the embedded stores (FalkorDB for episodes and working memory, SQLite for the
profile) takes writes with a different e-mail address in each field: message content,
producer, metadata keys and values, fact metadata keys and values, an invalidation reason,
working-memory state keys and values and its summary. Then the app stops (the embedded
server writes its files) and every file under the data dir (the FalkorDB RDB and
append-only files, the SQLite database and its journal) is read as bytes: none of the
addresses may be in any of them. Ids that hold personal data are refused with a 422 naming
the field, so nothing is stored under them at all.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings
from memmachine_server.app import create_app
from tests.faults.conftest import Report
from tests.server.conftest import LOCAL, make_settings
from tests.server.test_bad_input import error_of

#: One address per stored field, so a leak names its field.
PLANTED = {
    field: f"{field.replace('.', '-')}.leak@example.com"
    for field in (
        "message.content",
        "message.producer",
        "message.metadata.key",
        "message.metadata.value",
        "fact.value",
        "fact.metadata.key",
        "fact.metadata.value",
        "fact.invalidation_reason",
        "working.state.key",
        "working.state.value",
        "working.summary",
    )
}


def _write_everything(app: TestClient) -> None:
    user, pii = "pii-user", PLANTED
    added = app.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": "s",
            "messages": [
                {
                    "content": f"write to {pii['message.content']} marker-episode",
                    "producer": f"bot of {pii['message.producer']}",
                    "metadata": {
                        pii["message.metadata.key"]: "kept",
                        "contact": pii["message.metadata.value"],
                    },
                }
            ],
        },
    )
    assert added.status_code == 201, added.text
    fact = {
        "tag": "contact",
        "feature": "email",
        "value": f"mail {pii['fact.value']} marker-fact",
        "metadata": {pii["fact.metadata.key"]: 1, "from": pii["fact.metadata.value"]},
    }
    facts = app.post("/v1/profile", json={"user_id": user, "facts": [fact]})
    assert facts.status_code == 200, facts.text
    fact_id = facts.json()["facts"][0]["id"]
    closed = app.post(
        f"/v1/profile/facts/{fact_id}/invalidate",
        json={"user_id": user, "reason": f"moved, write {pii['fact.invalidation_reason']}"},
    )
    assert closed.status_code == 200, closed.text
    state = app.put(
        "/v1/sessions/s/working",
        json={
            "user_id": user,
            "state": {pii["working.state.key"]: {"email": pii["working.state.value"]}},
            "summary": f"talked about {pii['working.summary']} marker-working",
        },
    )
    assert state.status_code == 200, state.text


def test_no_planted_pii_is_in_any_store_file(tmp_path: Path, tally: Report) -> None:
    data_dir = tmp_path / "data"
    settings = make_settings(data_dir, embedding=EmbeddingSettings(provider="none"))
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as app:
        _write_everything(app)
        for field, value in (("user_id", "ana@example.com"), ("session_id", "+44 20 7946 0958")):
            ids = {"user_id": "pii-user", "session_id": "s", field: value}
            refused = app.post("/v1/memories", json={**ids, "messages": [{"content": "hi"}]})
            assert error_of(refused, 422)["field"] == field
    files = [path for path in data_dir.rglob("*") if path.is_file()]
    assert any("falkordb" in str(path) for path in files)
    assert any(path.suffix == ".db" for path in files)
    leaks = {
        field: [
            str(path.relative_to(data_dir)) for path in files if value.encode() in path.read_bytes()
        ]
        for field, value in PLANTED.items()
    }
    leaked = {field: where for field, where in leaks.items() if where}
    tally(
        case="PII scan, embedded stores", fields=len(PLANTED), files=len(files), leaked=len(leaked)
    )
    assert leaked == {}
    # The scan can see: what was written around each address is in the files as text
    # (episodes and working memory in FalkorDB's append-only file, facts in SQLite).
    for marker in (b"marker-episode", b"marker-fact", b"marker-working"):
        assert any(marker in path.read_bytes() for path in files), marker
