"""A write whose store takes it but does not answer in time is a 504 "write outcome
unknown", never a 503 (which says nothing was applied, and which clients send again)."""

from __future__ import annotations

from pathlib import Path

from memmachine.config import EmbeddingSettings, RetrievalSettings
from tests.faults.harness import frozen
from tests.server.conftest import AppFactory
from tests.server.test_bad_input import error_of


def test_an_add_to_a_frozen_store_is_504_outcome_unknown(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "frozen"
    app = app_factory(
        data_dir=data_dir,
        embedding=EmbeddingSettings(provider="none"),
        # nothing is read before the write, so the write is what meets the frozen store
        retrieval=RetrievalSettings(lexical_context=0),
        store_timeout_seconds=1.0,
    )
    body = {"user_id": "ana", "session_id": "s", "messages": [{"content": "said while frozen"}]}
    pid = int((data_dir / "falkordb" / "falkordb.pid").read_text())
    with frozen(pid):
        response = app.post("/v1/memories", json=body)
    error = error_of(response, 504)
    assert error["code"] == "write_outcome_unknown"
    assert "may or may not have been applied" in error["message"]
    # The store did get it: the answer was right not to say "nothing applied".
    listed = app.get("/v1/memories", params={"user_id": "ana"}).json()
    assert [e["content"] for e in listed["episodes"]] == ["said while frozen"]
