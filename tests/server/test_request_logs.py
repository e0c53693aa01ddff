"""One structured log line per request, with the request id the response returns; the jobs a
request enqueues log under the same id; JSON unless stderr is a terminal; no secret and no
personal data in any line."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.config import CompactionSettings, EmbeddingSettings, JobSettings, Settings
from memmachine_server.app import create_app
from memmachine_server.logs import configure_logging, wants_json
from tests.server.conftest import LOCAL, make_settings

SECRET = "s3cret-admin-key-0123456789"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Where :func:`configure_logging` writes during the test; the root logger is put back
    as it was afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def access(stream: io.StringIO) -> list[dict[str, Any]]:
    return [line for line in lines(stream) if line["logger"] == "memmachine.access"]


def test_json_unless_stderr_is_a_terminal() -> None:
    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            assert not wants_json("auto", terminal)
            assert wants_json("json", terminal)
        assert wants_json("auto", io.StringIO())
        assert not wants_json("text", io.StringIO())
    finally:
        os.close(leader)
        os.close(follower)


def test_one_line_per_request_with_the_id_the_response_returns(
    tmp_path: Path, captured: io.StringIO
) -> None:
    settings = make_settings(
        tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        log_format="json",
        jobs=JobSettings(poll_interval_seconds=0.02),
        compaction=CompactionSettings(keep_last_n=2, trigger_messages=0),
    )
    configure_logging(settings, captured)
    user = "ana-log-user-7"  # (ids holding an e-mail address are refused on writes)
    with TestClient(create_app(settings), base_url=LOCAL) as app:
        captured.truncate(0)
        captured.seek(0)
        given = app.post(
            "/v1/sessions/s1/working/messages",
            json={"user_id": user, "messages": [{"content": f"note {n}"} for n in range(5)]},
            headers={"X-Request-ID": "client-chosen.id-1"},
        )
        made = app.get("/v1/sessions/s1/working", params={"user_id": user})
        refused = app.get(
            "/v1/sessions/s1/working", params={"user_id": user}, headers={"X-Request-ID": "bad id!"}
        )
        compacted = app.post(
            "/v1/sessions/s1/compact",
            params={"user_id": user},
            headers={"X-Request-ID": "compact-42"},
        )
        job_id = compacted.json()["job"]["id"]
        deadline = time.monotonic() + 20
        while app.get(f"/v1/jobs/{job_id}", params={"user_id": user}).json()["status"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.02)

    assert given.headers["x-request-id"] == "client-chosen.id-1"
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    assert re.fullmatch(r"[0-9a-f]{32}", refused.headers["x-request-id"])  # replaced
    assert refused.headers["x-request-id"] != made.headers["x-request-id"]

    requests = access(captured)
    by_id = {line["request_id"]: line for line in requests}
    assert len(by_id) == len(requests)  # one line per request
    first = by_id["client-chosen.id-1"]
    assert (first["level"], first["method"], first["status"]) == ("INFO", "POST", 200)
    assert first["route"] == "/v1/sessions/{session_id}/working/messages"
    assert first["duration_ms"] >= 0
    assert by_id[made.headers["x-request-id"]]["route"] == "/v1/sessions/{session_id}/working"
    assert by_id["compact-42"]["status"] == 200

    job_lines = [line for line in lines(captured) if line["logger"] == "memmachine.jobs"]
    assert job_lines, "the worker logged nothing about the job"
    assert all(line.get("request_id") == "compact-42" for line in job_lines)
    assert any(job_id in line["message"] for line in job_lines)

    # an id in a path or a query is never logged by the server (the test client's own
    # httpx logger writes its URLs, ids included)
    served = [line for line in lines(captured) if not line["logger"].startswith("httpx")]
    assert served
    assert all(user not in json.dumps(line) for line in served)


def test_no_secret_or_personal_data_in_a_line(tmp_path: Path, captured: io.StringIO) -> None:
    settings = Settings(data_dir=tmp_path, admin_key=SECRET, log_format="json")
    configure_logging(settings, captured)
    log = logging.getLogger("memmachine.test")
    log.warning("key %s for ana@example.com, card 4111 1111 1111 1111", SECRET)
    try:
        raise ValueError(f"boom with {SECRET} and +44 20 7946 0958")
    except ValueError:
        log.exception("it failed for bob@example.org")
    text = captured.getvalue()
    for leak in (SECRET, "ana@example.com", "4111 1111 1111 1111", "bob@example.org", "7946 0958"):
        assert leak not in text
    first, second = lines(captured)
    assert first["message"] == "key *** for [EMAIL], card [CARD]"
    assert second["message"] == "it failed for [EMAIL]"
    assert "ValueError: boom with *** and [PHONE]" in second["exception"]


def test_text_lines_for_a_terminal(tmp_path: Path, captured: io.StringIO) -> None:
    configure_logging(Settings(data_dir=tmp_path, log_format="text"), captured)
    logging.getLogger("memmachine.test").warning("plain words")
    assert re.fullmatch(r"\S+ \S+ WARNING memmachine\.test: plain words\n", captured.getvalue()), (
        captured.getvalue()
    )
