"""Writes sent again with the same ``Idempotency-Key``: stored once, answered the same.

On the embedded stores (records in the embedded FalkorDB) and on production stores
(records on the working store's Redis): a retried add, fact upsert or working-memory
append is applied once and gets the first answer again; the same key with another body is
a 422 naming the header; eight requests in flight with one key store once; keys of two
tenants never meet; records survive a restart; and an add answered 504 (store frozen) and
then sent again with its key completes what the first attempt stored, once, in episodes and
working memory alike.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings, RetrievalSettings
from memmachine.memory.idempotency import episode_ids_for
from tests.faults.conftest import Report
from tests.faults.harness import frozen, own_neo4j
from tests.server.conftest import AppFactory
from tests.server.test_bad_input import error_of
from tests.services import RedisServer

NO_EMBEDDER = EmbeddingSettings(provider="none")


def _add(user: str, text: str, session: str = "s") -> dict[str, Any]:
    return {"user_id": user, "session_id": session, "messages": [{"content": text}]}


def _keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def _episodes(app: TestClient, user: str, **headers: str) -> list[str]:
    listed = app.get("/v1/memories", params={"user_id": user}, headers=headers)
    assert listed.status_code == 200, listed.text
    return [episode["content"] for episode in listed.json()["episodes"]]


def _working(app: TestClient, user: str, session: str = "s", **headers: str) -> list[str]:
    held = app.get(f"/v1/sessions/{session}/working", params={"user_id": user}, headers=headers)
    assert held.status_code == 200, held.text
    return [message["content"] for message in held.json()["messages"]]


@pytest.fixture(params=["embedded", "production"])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Settings of an app: the embedded stores, or a FalkorDB server for episodes and a
    Redis server for working memory (and so for the idempotency records)."""
    if request.param == "embedded":
        yield {"embedding": NO_EMBEDDER}
        return
    falkordb = RedisServer(tmp_path / "falkordb", None, falkordb=True, durable=True)
    redis = RedisServer(tmp_path / "redis", None, falkordb=False, durable=True)
    try:
        falkordb.wait_ready()
        redis.wait_ready()
        yield {
            "embedding": NO_EMBEDDER,
            "episode_store_url": f"falkordb://127.0.0.1:{falkordb.port}",
            "working_store_url": redis.url,
        }
    finally:
        redis.stop()
        falkordb.stop()


def test_a_retried_add_is_stored_once_and_answered_again(
    app_factory: AppFactory, deployment: dict[str, Any], tally: Report
) -> None:
    app = app_factory(**deployment)
    first = app.post(
        "/v1/memories", json=_add("ana", "my locker code is 4711"), headers=_keyed("k1")
    )
    again = app.post(
        "/v1/memories", json=_add("ana", "my locker code is 4711"), headers=_keyed("k1")
    )
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert _episodes(app, "ana") == ["my locker code is 4711"]
    assert _working(app, "ana") == ["my locker code is 4711"]
    # A new key is a new write.
    assert (
        app.post(
            "/v1/memories", json=_add("ana", "my locker code is 4711"), headers=_keyed("k2")
        ).status_code
        == 201
    )
    assert len(_episodes(app, "ana")) == 2
    tally(
        case=f"retried add, {'production' if deployment.get('working_store_url') else 'embedded'}",
        sent=3,
        stored=2,
        duplicated=0,
    )


def test_facts_and_working_memory_writes_are_applied_once(
    app_factory: AppFactory, deployment: dict[str, Any]
) -> None:
    app = app_factory(**deployment)
    note = {"user_id": "bo", "messages": [{"role": "user", "content": "remember the milk"}]}
    answers = [
        app.post("/v1/sessions/w/working/messages", json=note, headers=_keyed("append-1"))
        for _ in range(3)
    ]
    assert {answer.status_code for answer in answers} == {200}
    assert answers[2].json() == answers[0].json()
    assert _working(app, "bo", "w") == ["remember the milk"]

    fact = {"user_id": "bo", "facts": [{"tag": "home", "feature": "city", "value": "Oslo"}]}
    first = app.post("/v1/profile", json=fact, headers=_keyed("fact-1"))
    assert first.status_code == 200, first.text
    moved = {"user_id": "bo", "facts": [{"tag": "home", "feature": "city", "value": "Bergen"}]}
    assert app.post("/v1/profile", json=moved).status_code == 200
    # The retry of the first upsert answers as then and does not set Oslo again.
    again = app.post("/v1/profile", json=fact, headers=_keyed("fact-1"))
    assert again.json() == first.json()
    held = app.get(
        "/v1/profile/history", params={"user_id": "bo", "tag": "home", "feature": "city"}
    ).json()
    assert held["current"]["value"] == "Bergen"
    assert [version["value"] for version in held["history"]] == ["Oslo"]


def test_a_key_reused_for_another_request_is_422_naming_the_header(
    app_factory: AppFactory, deployment: dict[str, Any]
) -> None:
    app = app_factory(**deployment)
    assert (
        app.post("/v1/memories", json=_add("cy", "first"), headers=_keyed("k")).status_code == 201
    )
    error = error_of(app.post("/v1/memories", json=_add("cy", "second"), headers=_keyed("k")), 422)
    assert error["field"] == "Idempotency-Key"
    assert _episodes(app, "cy") == ["first"]
    bad = error_of(app.post("/v1/memories", json=_add("cy", "x"), headers=_keyed("has space")), 422)
    assert bad["field"] == "Idempotency-Key"
    assert _episodes(app, "cy") == ["first"]


def test_requests_in_flight_with_one_key_store_once(
    app_factory: AppFactory, deployment: dict[str, Any], tally: Report
) -> None:
    app = app_factory(**deployment)
    body = _add("dee", "booked the 7:40 train")
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(
                lambda _: app.post("/v1/memories", json=body, headers=_keyed("same")), range(8)
            )
        )
    assert [answer.status_code for answer in answers] == [201] * 8
    assert len({tuple(answer.json()["episode_ids"]) for answer in answers}) == 1
    assert _episodes(app, "dee") == ["booked the 7:40 train"]
    assert _working(app, "dee") == ["booked the 7:40 train"]
    where = "production" if deployment.get("working_store_url") else "embedded"
    tally(case=f"8 in flight with one key, {where}", sent=8, stored=1, duplicated=0)


def test_keys_of_two_tenants_never_meet(app_factory: AppFactory) -> None:
    app = app_factory(embedding=NO_EMBEDDER, api_keys="key-a=tenant-a,key-b=tenant-b")
    for key in ("key-a", "key-b"):
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "shared"}
        answer = app.post("/v1/memories", json=_add("eve", f"said to {key}"), headers=headers)
        assert answer.status_code == 201, answer.text
        assert "idempotent-replayed" not in answer.headers
    assert _episodes(app, "eve", Authorization="Bearer key-a") == ["said to key-a"]
    assert _episodes(app, "eve", Authorization="Bearer key-b") == ["said to key-b"]


def test_an_answer_is_kept_across_a_restart(app_factory: AppFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "kept"
    first = app_factory(data_dir=data_dir, embedding=NO_EMBEDDER)
    answer = first.post("/v1/memories", json=_add("fay", "parked on level 3"), headers=_keyed("r"))
    assert answer.status_code == 201
    first.__exit__(None, None, None)
    second = app_factory(data_dir=data_dir, embedding=NO_EMBEDDER)
    again = second.post("/v1/memories", json=_add("fay", "parked on level 3"), headers=_keyed("r"))
    assert (again.status_code, again.json()) == (201, answer.json())
    assert _episodes(second, "fay") == ["parked on level 3"]


def test_an_add_answered_504_then_retried_with_its_key_is_stored_once(
    app_factory: AppFactory, tmp_path: Path, tally: Report
) -> None:
    data_dir = tmp_path / "frozen"
    app = app_factory(
        data_dir=data_dir,
        embedding=NO_EMBEDDER,
        retrieval=RetrievalSettings(lexical_context=0),
        store_timeout_seconds=1.0,
    )
    body = _add("gil", "said while frozen")
    pid = int((data_dir / "falkordb" / "falkordb.pid").read_text())
    with frozen(pid):
        unknown = app.post("/v1/memories", json=body, headers=_keyed("frozen-1"))
    assert error_of(unknown, 504)["code"] == "write_outcome_unknown"
    retried = app.post("/v1/memories", json=body, headers=_keyed("frozen-1"))
    assert retried.status_code == 201, retried.text
    assert retried.json()["repeated_ids"] == []  # it completes the add: not a repeat
    assert _episodes(app, "gil") == ["said while frozen"]
    assert _working(app, "gil") == ["said while frozen"]
    again = app.post("/v1/memories", json=body, headers=_keyed("frozen-1"))
    assert again.json() == retried.json()
    tally(case="add 504 then retried with its key, embedded", sent=3, stored=1, duplicated=0)


def test_an_append_frozen_in_working_memory_then_retried_agrees_with_episodes(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Production: the episode is stored, the working-memory append meets a frozen Redis
    (504). The retry with the key finds the episode and completes working memory once."""
    falkordb = RedisServer(tmp_path / "falkordb", None, falkordb=True, durable=True)
    redis = RedisServer(tmp_path / "redis", None, falkordb=False, durable=True)
    try:
        falkordb.wait_ready()
        redis.wait_ready()
        app = app_factory(
            embedding=NO_EMBEDDER,
            episode_store_url=f"falkordb://127.0.0.1:{falkordb.port}",
            working_store_url=redis.url,
            retrieval=RetrievalSettings(lexical_context=0),
            store_timeout_seconds=1.0,
        )
        body = _add("hal", "appended while redis slept")
        assert (
            app.post("/v1/memories", json=_add("hal", "warm-up"), headers=_keyed("w0")).status_code
            == 201
        )
        with frozen(redis.process.pid):
            unknown = app.post("/v1/memories", json=body, headers=_keyed("hal-1"))
        assert unknown.status_code in (503, 504), unknown.text
        retried = app.post("/v1/memories", json=body, headers=_keyed("hal-1"))
        assert retried.status_code == 201, retried.text
        assert retried.json()["repeated_ids"] == []  # it completes the add: not a repeat
        assert _episodes(app, "hal") == ["warm-up", "appended while redis slept"]
        assert _working(app, "hal") == ["warm-up", "appended while redis slept"]
    finally:
        for server in (redis, falkordb):
            if server.process.poll() is None:
                os.kill(server.process.pid, 18)  # SIGCONT
            server.stop()


def test_the_sdk_repeats_an_add_with_its_key_and_it_is_stored_once(app_factory: AppFactory) -> None:
    from memmachine_sdk import Client

    app = app_factory(embedding=NO_EMBEDDER)
    with Client(http_client=app) as mm:
        first = mm.add(["lunch with Ida"], user_id="ida", session_id="s", idempotency_key="lunch")
        again = mm.add(["lunch with Ida"], user_id="ida", session_id="s", idempotency_key="lunch")
        other = mm.add(["lunch with Ida"], user_id="ida", session_id="s")
    assert again.episode_ids == first.episode_ids
    assert other.episode_ids != first.episode_ids
    assert _episodes(app, "ida") == ["lunch with Ida", "lunch with Ida"]


def test_a_keyed_body_over_the_size_limit_streamed_in_is_413(app_factory: AppFactory) -> None:
    app = app_factory(embedding=NO_EMBEDDER, limits={"max_request_bytes": 10_000})
    huge = json.dumps(_add("jo", "z" * 20_000)).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit meets the stream
        yield from (huge[start : start + 4096] for start in range(0, len(huge), 4096))

    headers = {"Content-Type": "application/json", **_keyed("big")}
    refused = app.post("/v1/memories", content=chunks(), headers=headers)
    assert error_of(refused, 413)["code"] == "payload_too_large"
    assert _episodes(app, "jo") == []


def test_an_attachment_add_answered_504_then_retried_with_its_key_is_stored_once(
    app_factory: AppFactory, tmp_path: Path, tally: Report
) -> None:
    """Production stores, the episode store frozen during the add (the key's record, on
    Redis, is claimed): 504, which releases the key, so the retry runs afresh and only ids
    derived from the key (episodes, blob holders, links) let it find what the first
    attempt stored once the store woke up."""
    falkordb = RedisServer(tmp_path / "falkordb", None, falkordb=True, durable=True)
    redis = RedisServer(tmp_path / "redis", None, falkordb=False, durable=True)
    data_dir = tmp_path / "data"
    try:
        falkordb.wait_ready()
        redis.wait_ready()
        app = app_factory(
            data_dir=data_dir,
            embedding=NO_EMBEDDER,
            episode_store_url=f"falkordb://127.0.0.1:{falkordb.port}",
            working_store_url=redis.url,
            retrieval=RetrievalSettings(lexical_context=0),
            store_timeout_seconds=1.0,
        )
        photo = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
        uri = f"data:image/png;base64,{base64.b64encode(photo).decode()}"
        attachment = {"data_uri": uri, "caption": "red bike"}
        message = {"content": "the new bike", "attachments": [attachment]}
        body = {"user_id": "ivy", "session_id": "s", "messages": [message]}
        with frozen(falkordb.process.pid):
            unknown = app.post("/v1/memories", json=body, headers=_keyed("bike-1"))
        assert error_of(unknown, 504)["code"] == "write_outcome_unknown"
        retried = app.post("/v1/memories", json=body, headers=_keyed("bike-1"))
        assert retried.status_code == 201, retried.text
        assert _episodes(app, "ivy") == ["the new bike", "red bike"]
        assert _working(app, "ivy") == ["the new bike", "red bike"]
        _, picture = retried.json()["episode_ids"]
        download = app.get(f"/v1/memories/{picture}/attachment", params={"user_id": "ivy"})
        assert (download.status_code, download.content) == (200, photo)
        # One blob, held once: deleting the episode removes it.
        deleted = app.delete(f"/v1/memories/{picture}", params={"user_id": "ivy"})
        assert deleted.status_code == 204
        assert not [path for path in (data_dir / "blobs").rglob("*") if path.is_file()]
    finally:
        for server in (redis, falkordb):
            if server.process.poll() is None:
                os.kill(server.process.pid, 18)  # SIGCONT
            server.stop()
    tally(case="attachment add 504 then retried with its key, production", sent=2, stored=1)


def test_an_uploaded_attachment_is_stored_under_the_id_its_key_derives(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """The id does not rest on the kept answer: a retry after a 504 (key released) stores
    under the same id, so it finds the first attempt's episode."""
    app = app_factory(data_dir=tmp_path / "upload", embedding=NO_EMBEDDER)
    where = {"user_id": "jon", "session_id": "s"}
    form = {"caption": "the lease, signed"}
    files = {"file": ("lease.txt", b"Lease of flat 4, signed 2 May.", "text/plain")}
    built = httpx.Request("POST", "http://x", data=form, files=files)
    encoded = (built.read(), built.headers["Content-Type"])

    def upload() -> Any:
        # One multipart boundary for both: the key's fingerprint covers the body's bytes.
        content, kind = encoded
        return app.post(
            "/v1/memories/attachments",
            params=where,
            content=content,
            headers={"Content-Type": kind, **_keyed("up")},
        )

    first = upload()
    assert first.status_code == 201, first.text
    assert first.json()["episode_ids"] == episode_ids_for("default", "up", 1)
    assert upload().json() == first.json()
    assert _episodes(app, "jon") == ["the lease, signed"]


def _sent_until_final(send: Callable[[], Any], *, keyed: bool) -> Any:
    """The answer to ``send()``, sent again up to ten times after a 503 (nothing applied)
    and, with ``keyed`` (the key makes it safe), a 504: a cold Neo4j JVM on a loaded machine
    may run a first write past the timeout, and a retry right after the JVM wakes may wait
    on a lock of the frozen attempt's transaction until the server has rolled it back."""
    again = {503, 504} if keyed else {503}
    answer = send()
    for _ in range(9):
        if answer.status_code not in again:
            break
        answer = send()
    return answer


def test_an_add_answered_504_by_a_frozen_neo4j_then_retried_with_its_key_is_stored_once(
    app_factory: AppFactory, tmp_path: Path, tally: Report
) -> None:
    """Episodes on Neo4j, frozen (SIGSTOP of its JVM) during the add: the client gives up
    after its bound (504, the key released) instead of hanging; the retry with the key,
    once Neo4j is back, leaves the add stored once, in episodes and working memory."""
    with own_neo4j() as neo4j:
        redis = RedisServer(tmp_path / "redis", None, falkordb=False, durable=True)
        try:
            redis.wait_ready()
            app = app_factory(
                embedding=NO_EMBEDDER,
                episode_store_url=f"bolt://neo4j:{neo4j.password}@127.0.0.1:{neo4j.port}",
                working_store_url=redis.url,
                retrieval=RetrievalSettings(lexical_context=0),
                store_timeout_seconds=2.0,
            )
            warm_up = _sent_until_final(
                lambda: app.post("/v1/memories", json=_add("kim", "warm-up")), keyed=False
            )
            assert warm_up.status_code == 201, warm_up.text
            body = _add("kim", "said while neo4j slept")
            assert neo4j.process is not None
            with frozen(neo4j.process.pid):
                unknown = app.post("/v1/memories", json=body, headers=_keyed("kim-1"))
            assert error_of(unknown, 504)["code"] == "write_outcome_unknown"
            retried = _sent_until_final(
                lambda: app.post("/v1/memories", json=body, headers=_keyed("kim-1")), keyed=True
            )
            assert retried.status_code == 201, retried.text
            assert _episodes(app, "kim") == ["warm-up", "said while neo4j slept"]
            assert _working(app, "kim") == ["warm-up", "said while neo4j slept"]
            again = app.post("/v1/memories", json=body, headers=_keyed("kim-1"))
            assert again.json() == retried.json()
        finally:
            redis.stop()
    tally(case="add 504 (Neo4j frozen) then retried with its key", sent=3, stored=1, duplicated=0)
