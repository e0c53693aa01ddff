"""Retries, backoff and timeouts, against a scripted loopback HTTP server: what is tried
again, how often, how long the client waits when told, and what is never repeated."""

from __future__ import annotations

import logging
import random
import re
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from memmachine_sdk import (
    AsyncClient,
    Client,
    MemMachineConnectionError,
    MemMachineTimeoutError,
    RateLimitedError,
    RetryPolicy,
    ServerError,
    ServiceUnavailableError,
    WriteOutcomeUnknownError,
)
from memmachine_sdk.errors import parse_retry_after
from tests.sdk.conftest import Reply, ScriptedServer

FAST = RetryPolicy(max_retries=2, backoff_base=0.01, backoff_max=0.05)
ADDED = {"session_id": "s", "episode_ids": ["e1"]}
UNAVAILABLE = {"error": {"code": "store_unavailable", "message": "the episodes store is down"}}
LIMITED = {"error": {"code": "rate_limited", "message": "slow down"}}
WORKING = {
    "user_id": "u",
    "session_id": "s",
    "messages": [],
    "message_count": 0,
    "state": {"step": 2},
    "summary": None,
    "version": 7,
    "ttl_seconds": None,
    "updated_at": None,
}


def waits(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The delays the client announced before each retry."""
    found = [re.search(r" in ([0-9.]+)s after", r.getMessage()) for r in caplog.records]
    return [float(match.group(1)) for match in found if match]


def test_503_then_success_is_retried_with_backoff(
    scripted: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    scripted.answer(Reply(503, UNAVAILABLE), Reply(503, UNAVAILABLE), Reply(201, ADDED))
    caplog.set_level(logging.INFO, logger="memmachine_sdk")
    with Client(scripted.url, retry=FAST) as mm:
        added = mm.memory(user_id="u", session_id="s").add("hello")
    assert added.episode_ids == ["e1"]
    # an add is retried on 503: the server's writes are all-or-nothing
    assert [seen.path for seen in scripted.seen] == ["/v1/memories"] * 3
    assert all(seen.body == scripted.seen[0].body for seen in scripted.seen)
    delays = waits(caplog)
    assert len(delays) == 2
    assert delays[0] <= 0.01
    assert delays[1] <= 0.02  # full jitter below base * 2**n


def test_retries_are_bounded_and_the_last_error_is_typed(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(503, UNAVAILABLE))
    with Client(scripted.url, retry=FAST) as mm, pytest.raises(ServiceUnavailableError) as err:
        mm.health()
    assert len(scripted.seen) == 3  # max_retries=2: three attempts in all
    assert (err.value.status, err.value.code) == (503, "store_unavailable")
    assert err.value.message == "the episodes store is down"


def test_429_waits_what_retry_after_says(
    scripted: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    scripted.answer(Reply(429, LIMITED, {"Retry-After": "1"}), Reply(201, ADDED))
    caplog.set_level(logging.INFO, logger="memmachine_sdk")
    with Client(scripted.url, retry=FAST) as mm:
        assert mm.add(["hi"], user_id="u", session_id="s").episode_ids == ["e1"]
    assert len(scripted.seen) == 2
    assert waits(caplog) == [1.0]  # not the 0.01 s backoff


def test_429_with_a_long_retry_after_is_raised_at_once(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(429, LIMITED, {"Retry-After": "120"}))
    with Client(scripted.url, retry=FAST) as mm, pytest.raises(RateLimitedError) as err:
        mm.search("x", user_id="u")
    assert len(scripted.seen) == 1
    assert err.value.retry_after == 120.0
    assert err.value.code == "rate_limited"


def test_gateway_errors_retry_reads_but_never_an_add(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(502), Reply(200, WORKING))
    with Client(scripted.url, retry=FAST) as mm:
        assert mm.memory(user_id="u", session_id="s").state.get().version == 7
    assert len(scripted.seen) == 2

    # behind a failing proxy the add may have been stored: repeating it could store twice
    scripted.answer(Reply(504), Reply(201, ADDED))
    with Client(scripted.url, retry=FAST) as mm, pytest.raises(ServerError) as err:
        mm.add(["once only"], user_id="u", session_id="s")
    assert err.value.status == 504
    assert len(scripted.seen) == 1


OUTCOME_UNKNOWN = {
    "error": {
        "code": "write_outcome_unknown",
        "message": "the episodic store did not answer in time",
    }
}


def test_an_add_whose_outcome_is_unknown_is_never_repeated(scripted: ScriptedServer) -> None:
    # The store may hold the episodes: sending the add again could store them twice.
    scripted.answer(Reply(504, OUTCOME_UNKNOWN), Reply(201, ADDED))
    with Client(scripted.url, retry=FAST) as mm, pytest.raises(WriteOutcomeUnknownError) as err:
        mm.add(["once only"], user_id="u", session_id="s")
    assert (err.value.status, err.value.code) == (504, "write_outcome_unknown")
    assert isinstance(err.value, ServerError)
    assert len(scripted.seen) == 1


def test_an_add_sends_one_idempotency_key_on_all_its_attempts(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(503, UNAVAILABLE), Reply(201, ADDED))
    with Client(scripted.url, retry=FAST) as mm:
        mm.add(["first"], user_id="u", session_id="s")
        keys = [seen.headers.get("idempotency-key") for seen in scripted.seen]
        scripted.answer(Reply(201, ADDED))
        mm.add(["second"], user_id="u", session_id="s")
    first, retried = keys
    assert first
    assert first == retried
    [second] = [seen.headers.get("idempotency-key") for seen in scripted.seen]
    assert second
    assert second != first
    # reads carry none
    scripted.answer(Reply(200, WORKING))
    with Client(scripted.url, retry=FAST) as mm:
        mm.get_working("s", user_id="u")
    assert "idempotency-key" not in scripted.seen[0].headers


def test_a_timeout_on_add_is_not_repeated_but_a_read_is(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(201, ADDED, hang=True))
    with Client(scripted.url, retry=FAST, timeout=0.3) as mm:
        with pytest.raises(MemMachineTimeoutError) as err:
            mm.add(["once only"], user_id="u", session_id="s")
        assert err.value.request_sent is True
        assert len(scripted.seen) == 1

        scripted.answer(Reply(200, WORKING, hang=True))
        with pytest.raises(MemMachineTimeoutError):
            mm.get_working("s", user_id="u")
        assert len(scripted.seen) == 3


def test_a_conditional_state_write_is_not_repeated(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(502))
    with Client(scripted.url, retry=FAST) as mm:
        memory = mm.memory(user_id="u", session_id="s")
        with pytest.raises(ServerError):
            memory.state.set({"step": 3}, expected_version=7)
        assert len(scripted.seen) == 1  # a repeat after success would fail with a conflict
        with pytest.raises(ServerError):
            memory.state.set({"step": 3})  # a plain replace is safe to repeat
        assert len(scripted.seen) == 1 + 3
    assert scripted.seen[-1].body == {"state": {"step": 3}, "user_id": "u"}


def test_refused_connections_are_retried_for_any_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens on it once closed
    caplog.set_level(logging.INFO, logger="memmachine_sdk")
    with (
        Client(f"http://127.0.0.1:{port}", retry=FAST) as mm,
        pytest.raises(MemMachineConnectionError) as err,
    ):
        mm.add(["never sent"], user_id="u", session_id="s")
    assert err.value.request_sent is False  # so repeating it was safe
    assert not isinstance(err.value, MemMachineTimeoutError)
    assert len(waits(caplog)) == 2


def test_max_retries_zero_sends_once(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(503, UNAVAILABLE), Reply(200, WORKING))
    with Client(scripted.url, max_retries=0) as mm, pytest.raises(ServiceUnavailableError):
        mm.get_working("s", user_id="u")
    assert len(scripted.seen) == 1


async def test_async_client_retries_and_times_out_alike(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(429, LIMITED, {"Retry-After": "0"}), Reply(503), Reply(201, ADDED))
    async with AsyncClient(scripted.url, retry=FAST, timeout=0.3) as mm:
        memory = mm.memory(user_id="u", session_id="s")
        assert (await memory.add("hello")).episode_ids == ["e1"]
        assert len(scripted.seen) == 3

        scripted.answer(Reply(201, ADDED, hang=True))
        with pytest.raises(MemMachineTimeoutError):
            await memory.add("once only")
        assert len(scripted.seen) == 1

        scripted.answer(Reply(504))
        with pytest.raises(ServerError) as err:
            await memory.search("anything")
        assert err.value.status == 504
        assert len(scripted.seen) == 3  # a search is a read: retried


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    in_an_hour = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    assert 3500 < (parse_retry_after(in_an_hour) or 0) <= 3600
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # already passed
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_backoff_has_full_jitter_under_a_growing_ceiling() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base=0.5, backoff_max=3.0)
    rng = random.Random(7)
    for retry, ceiling in enumerate([0.5, 1.0, 2.0, 3.0, 3.0]):
        delays = [policy.backoff(retry, rng) for _ in range(200)]
        assert all(0.0 <= delay <= ceiling for delay in delays)
        assert max(delays) > ceiling * 0.8  # spread over the whole range, not fixed
        assert min(delays) < ceiling * 0.2
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)
