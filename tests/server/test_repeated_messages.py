"""A client that POSTs the same messages again without an idempotency key (a retry after a
timeout, a conversation imported twice) gets the same answer and stores nothing twice."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.config import JobSettings, LlmSettings, RetentionPolicy, RetentionSettings
from memmachine.models import EXPIRED_SOURCE, FactRecord, NewMessage, Scope
from tests.fakes.clock import ManualClock
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer
from tests.integration.test_expiry import manager_of, start
from tests.server.conftest import AppFactory

#: ``clocked(**settings)``: a started app on the embedded stores whose clock the test moves.
Clocked = Callable[..., tuple[TestClient, ManualClock]]


@pytest.fixture
def clocked(tmp_path: Path) -> Iterator[Clocked]:
    opened: list[TestClient] = []

    def open_app(**overrides: Any) -> tuple[TestClient, ManualClock]:
        clock = ManualClock()
        opened.append(start((tmp_path / f"app{len(opened)}").resolve(), clock, **overrides))
        return opened[-1], clock

    yield open_app
    for api in opened:
        api.__exit__(None, None, None)


def post(api: TestClient, user: str, messages: list[dict[str, Any]]) -> list[str]:
    response = api.post(
        "/v1/memories", json={"user_id": user, "session_id": "s1", "messages": messages}
    )
    assert response.status_code == 201, response.text
    ids: list[str] = response.json()["episode_ids"]
    return ids


def stored(api: TestClient, user: str) -> list[str]:
    page = api.get("/v1/memories", params={"user_id": user}).json()
    assert page["total"] == len(page["episodes"])
    return [episode["content"] for episode in page["episodes"]]


def test_the_same_messages_posted_again_answer_the_same_ids_and_store_nothing(
    api: TestClient,
) -> None:
    conversation = [
        {"content": "we moved to Lisbon", "producer": "ann", "timestamp": "2024-05-01T10:00:00Z"},
        {"content": "with the cat", "producer": "ann", "timestamp": "2024-05-01T10:01:00Z"},
    ]
    first = post(api, "ann-repeat", conversation)
    assert post(api, "ann-repeat", conversation) == first
    assert stored(api, "ann-repeat") == ["we moved to Lisbon", "with the cat"]
    working = api.get("/v1/sessions/s1/working", params={"user_id": "ann-repeat"}).json()
    assert [m["content"] for m in working["messages"]] == ["we moved to Lisbon", "with the cat"]

    # One new message among the repeated ones is the only one stored.
    longer = [*conversation, {**conversation[1], "content": "and the piano"}]
    assert post(api, "ann-repeat", longer)[:2] == first
    assert stored(api, "ann-repeat") == ["we moved to Lisbon", "with the cat", "and the piano"]


def test_messages_without_a_timestamp_are_new_messages_each_time(api: TestClient) -> None:
    first = post(api, "bob-repeat", [{"content": "ok"}])
    second = post(api, "bob-repeat", [{"content": "ok"}])
    assert first != second
    assert stored(api, "bob-repeat") == ["ok", "ok"]


def test_a_repeated_message_queues_no_second_extraction(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = app_factory(
        llm=LlmSettings(base_url=llm_server.base_url, model="x", max_retries=0),
        jobs=JobSettings(poll_interval_seconds=0.02, max_attempts=1),
    )
    llm_server.reply(json.dumps({"facts": []}), json.dumps({"facts": []}))
    message = {"content": "I love black coffee", "timestamp": "2024-05-01T08:00:00Z"}
    later = {"content": "and green tea", "timestamp": "2024-05-01T08:01:00Z"}
    [first] = post(api, "cy-repeat", [message])
    assert post(api, "cy-repeat", [message]) == [first]
    again, second = post(api, "cy-repeat", [message, later])
    assert again == first
    jobs = api.get("/v1/jobs", params={"user_id": "cy-repeat"}).json()["jobs"]
    extracted = [job["payload"]["episode_ids"] for job in jobs if job["kind"] == "extract"]
    assert sorted(extracted) == sorted([[first], [second]])


def test_a_message_posted_again_after_it_expired_is_stored_and_read_again(
    clocked: Clocked,
) -> None:
    api, clock = clocked()
    code = {
        "content": "the gate code is 4412",
        "producer": "ann",
        "timestamp": "2024-05-01T10:00:00Z",
        "ttl_seconds": 5,
    }
    [first] = post(api, "ann-expired", [code])
    clock.advance(5)  # expired; the retention sweep has not run
    assert api.get("/v1/memories", params={"user_id": "ann-expired"}).json()["episodes"] == []

    assert post(api, "ann-expired", [{**code, "ttl_seconds": 3600}]) == [first]
    assert stored(api, "ann-expired") == ["the gate code is 4412"]
    episode = api.get(f"/v1/memories/{first}", params={"user_id": "ann-expired"}).json()
    assert episode["metadata"]["expires_at"] == (clock.now() + timedelta(seconds=3600)).isoformat()
    found = api.post(
        "/v1/memories/search", json={"user_id": "ann-expired", "query": "gate code"}
    ).json()
    assert [hit["id"] for hit in found["episodic"]] == [first]
    working = api.get("/v1/sessions/s1/working", params={"user_id": "ann-expired"}).json()
    assert [m["content"] for m in working["messages"]] == ["the gate code is 4412"]

    # The sweep finds nothing expired to remove: the message stays.
    report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
    assert report.episodes_expired == 0
    assert stored(api, "ann-expired") == ["the gate code is 4412"]
    working = api.get("/v1/sessions/s1/working", params={"user_id": "ann-expired"}).json()
    assert [m["content"] for m in working["messages"]] == ["the gate code is 4412"]


def test_a_message_posted_again_after_it_expired_is_extracted_again(
    clocked: Clocked,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api, clock = clocked(
        llm=LlmSettings(base_url=llm_server.base_url, model="x", max_retries=0),
        jobs=JobSettings(poll_interval_seconds=0.02, max_attempts=1),
    )
    llm_server.reply(json.dumps({"facts": []}), json.dumps({"facts": []}))
    message = {"content": "I drink oat milk", "timestamp": "2024-05-01T08:00:00Z"}
    [first] = post(api, "fay-expired", [{**message, "ttl_seconds": 60}])
    clock.advance(60)
    assert post(api, "fay-expired", [message]) == [first]
    jobs = api.get("/v1/jobs", params={"user_id": "fay-expired"}).json()["jobs"]
    extracted = [job["payload"]["episode_ids"] for job in jobs if job["kind"] == "extract"]
    assert extracted == [[first], [first]]


def test_the_answer_names_the_messages_that_were_already_stored(api: TestClient) -> None:
    moved = {"content": "we moved to Lisbon", "timestamp": "2024-06-01T10:00:00Z"}
    cat = {"content": "with the cat", "timestamp": "2024-06-01T10:01:00Z"}
    body = {"user_id": "dee-repeat", "session_id": "s1"}

    first = api.post("/v1/memories", json={**body, "messages": [moved]}).json()
    assert first["repeated_ids"] == []
    both = api.post("/v1/memories", json={**body, "messages": [moved, cat]}).json()
    assert both["episode_ids"][0] == first["episode_ids"][0]
    assert both["repeated_ids"] == first["episode_ids"]  # the cat is new
    again = api.post("/v1/memories", json={**body, "messages": [cat, moved]}).json()
    assert again["repeated_ids"] == [both["episode_ids"][1], both["episode_ids"][0]]

    # The same new message twice in one add was not stored before: not a repeat.
    piano = {"content": "and the piano", "timestamp": "2024-06-01T10:02:00Z"}
    twice = api.post("/v1/memories", json={**body, "messages": [piano, piano]}).json()
    assert twice["episode_ids"][0] == twice["episode_ids"][1]
    assert twice["repeated_ids"] == []
    # Without a timestamp a message is never a repeat.
    plain = api.post("/v1/memories", json={**body, "messages": [{"content": "ok"}] * 2}).json()
    assert plain["repeated_ids"] == []


def test_a_keyed_add_and_its_retry_report_no_repeats(api: TestClient) -> None:
    """An add with an idempotency key is stored under ids of its key: its retry is the same
    add (answered as the first time), not a repeat of its messages."""
    message = {"content": "the boiler is fixed", "timestamp": "2024-06-02T09:00:00Z"}
    body = {"user_id": "eve-repeat", "session_id": "s1", "messages": [message]}
    keyed = {"Idempotency-Key": "boiler-1"}
    first = api.post("/v1/memories", json=body, headers=keyed)
    retried = api.post("/v1/memories", json=body, headers=keyed)
    assert first.status_code == retried.status_code == 201, retried.text
    assert retried.json() == first.json()
    assert first.json()["repeated_ids"] == []
    assert stored(api, "eve-repeat") == ["the boiler is fixed"]


def test_a_sweep_that_read_the_expired_episode_keeps_the_message_sent_again_meanwhile(
    clocked: Clocked,
) -> None:
    api, clock = clocked()
    manager = manager_of(api)
    store = manager.episodic_service.store
    message = {
        "content": "the wifi password is on the fridge",
        "timestamp": "2024-05-01T10:00:00Z",
        "ttl_seconds": 5,
    }
    [first] = post(api, "gus-race", [message])
    clock.advance(5)
    session = Scope(user_id="gus-race", session_id="s1")

    async def sent_again_first(scope: Scope, episode_id: str, **options: Any) -> bool:
        # The sweep has read the expired episode; the message is sent again before the
        # sweep removes what it read.
        del store.delete_episode  # type: ignore[attr-defined]
        again = await manager.add_messages(session, [NewMessage(**message)])
        assert [episode.id for episode in again.new] == [first]
        return await store.delete_episode(scope, episode_id, **options)

    store.delete_episode = sent_again_first  # type: ignore[method-assign]
    report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
    assert report.episodes_expired == 0
    assert stored(api, "gus-race") == ["the wifi password is on the fridge"]
    working = api.get("/v1/sessions/s1/working", params={"user_id": "gus-race"}).json()
    assert [m["content"] for m in working["messages"]] == [message["content"]]


@pytest.mark.parametrize("removed_as", ["expired", "aged-out"])
def test_a_message_sent_again_after_the_sweep_removed_its_episode_keeps_its_working_copy(
    clocked: Clocked, removed_as: str
) -> None:
    """The sweep removes an episode (expired, or older than the tenant's policy), then,
    before it reaches working memory, the message is sent again and stored anew under the
    same id: the sweep clears the removed episode's copy from working memory, never the
    one just appended."""
    policy = RetentionPolicy(tenant="default", episodes_max_age_days=30)
    aged = removed_as == "aged-out"
    api, clock = clocked(retention=RetentionSettings(sweep_interval_seconds=0, policies=[policy]))
    manager = manager_of(api)
    store = manager.episodic_service.store
    message: dict[str, Any] = {
        "content": "the spare key is under the blue pot",
        "timestamp": (clock.now() - timedelta(days=31 if aged else 1)).isoformat(),
    }
    [first] = post(api, "hal-race", [message if aged else {**message, "ttl_seconds": 5}])
    clock.advance(5)
    session = Scope(user_id="hal-race", session_id="s1")

    async def sent_again_after(scope: Scope, episode_id: str, **options: Any) -> bool:
        del store.delete_episode  # type: ignore[attr-defined]
        removed = await store.delete_episode(scope, episode_id, **options)
        # The sweep has removed the episode; the message is sent again before the sweep
        # clears working memory.
        again = await manager.add_messages(session, [NewMessage(**message)])
        assert [episode.id for episode in again.new] == [first]
        return removed

    store.delete_episode = sent_again_after  # type: ignore[method-assign]
    report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
    assert (report.episodes_aged_out, report.episodes_expired) == ((1, 0) if aged else (0, 1))
    assert stored(api, "hal-race") == [message["content"]]
    working = api.get("/v1/sessions/s1/working", params={"user_id": "hal-race"}).json()
    assert [m["content"] for m in working["messages"]] == [message["content"]]
    assert api.get(f"/v1/memories/{first}", params={"user_id": "hal-race"}).status_code == 200


def test_an_add_completed_by_a_retry_with_its_ids_queues_one_extraction(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    """A retry with the same ids (an idempotency key's) that finds the first attempt's
    episodes stored completes that add: its extraction job is the first attempt's, queued
    once, so the same messages are not extracted (and their facts corroborated) twice."""
    api = app_factory(
        llm=LlmSettings(base_url=llm_server.base_url, model="x", max_retries=0),
        jobs=JobSettings(poll_interval_seconds=0.02, max_attempts=1),
    )
    llm_server.reply(json.dumps({"facts": []}), json.dumps({"facts": []}))
    manager = manager_of(api)
    session = Scope(user_id="ida-retry", session_id="s1")
    message = NewMessage(content="I work night shifts at the bakery")
    ids = ["ida-retry-1"]
    add = partial(manager.add_messages, session, [message], ids=ids)
    first = api.portal.call(add)  # type: ignore[union-attr]
    retried = api.portal.call(add)  # type: ignore[union-attr]
    assert [e.id for e in retried] == [e.id for e in first] == ids
    jobs = api.get("/v1/jobs", params={"user_id": "ida-retry"}).json()["jobs"]
    assert [job["payload"]["episode_ids"] for job in jobs if job["kind"] == "extract"] == [ids]


def test_a_rejected_add_leaves_the_expired_episode_it_repeats_to_the_sweep(
    clocked: Clocked,
) -> None:
    """An add refused for bad input changes nothing, not even the expired episode one of
    its messages repeats: the sweep still removes it, with what removing it does (the
    facts it supported say their source expired, rather than naming an episode gone)."""
    api, clock = clocked()
    manager = manager_of(api)
    code = {
        "content": "the alarm code is 5521",
        "timestamp": "2024-05-01T10:00:00Z",
        "ttl_seconds": 5,
    }
    [first] = post(api, "ivy-rejected", [code])
    record = FactRecord(tag="home", feature="alarm", value="5521", source_episode_ids=[first])
    user = Scope(user_id="ivy-rejected", session_id="s1")
    [fact] = api.portal.call(manager.set_facts, user, [record])  # type: ignore[union-attr]
    clock.advance(5)

    past = (clock.now() - timedelta(seconds=1)).isoformat()
    late = {"content": "the gate is fixed", "timestamp": "2024-05-01T10:01:00Z", "expires_at": past}
    body = {"user_id": "ivy-rejected", "session_id": "s1", "messages": [code, late]}
    rejected = api.post("/v1/memories", json=body)
    assert rejected.status_code == 422, rejected.text
    assert rejected.json()["error"]["field"] == "messages.1.expires_at"

    report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
    assert (report.episodes_expired, report.fact_sources_expired) == (1, 1)
    shown = api.get(f"/v1/profile/facts/{fact.id}", params={"user_id": "ivy-rejected"}).json()
    assert shown["source_episode_ids"] == [EXPIRED_SOURCE]


def test_facts_of_a_message_sent_again_after_the_sweep_removed_its_episode_keep_it(
    clocked: Clocked,
) -> None:
    """The sweep removes an expired episode; the message is sent again, stored anew under
    the same id and a fact drawn from it, before the sweep marks the removed episodes'
    facts: that fact keeps naming the stored message, not the expired marker."""
    api, clock = clocked()
    manager = manager_of(api)
    store = manager.episodic_service.store
    message = {"content": "I moved to Porto", "timestamp": "2024-05-01T10:00:00Z"}
    [first] = post(api, "jo-race", [{**message, "ttl_seconds": 5}])
    clock.advance(5)
    session = Scope(user_id="jo-race", session_id="s1")
    facts = []

    async def sent_again_after(scope: Scope, episode_id: str, **options: Any) -> bool:
        del store.delete_episode  # type: ignore[attr-defined]
        removed = await store.delete_episode(scope, episode_id, **options)
        again = await manager.add_messages(session, [NewMessage(**message)])
        drawn = FactRecord(tag="home", feature="city", value="Porto", source_episode_ids=[first])
        facts.extend(await manager.set_facts(session, [drawn]))
        assert [episode.id for episode in again.new] == [first]
        return removed

    store.delete_episode = sent_again_after  # type: ignore[method-assign]
    report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
    assert (report.episodes_expired, report.fact_sources_expired) == (1, 0)
    shown = api.get(f"/v1/profile/facts/{facts[0].id}", params={"user_id": "jo-race"}).json()
    assert shown["source_episode_ids"] == [first]
