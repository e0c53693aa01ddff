"""API key generation, parsing and hashing, and the in-process token bucket's arithmetic
(its contract is checked with the Redis one in ``tests/contract/test_rate_limiter.py``)."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from memmachine.adapters.inprocess.in_process_rate_limiter import InProcessRateLimiter
from memmachine.auth import hash_secret, issue_key, parse_key, secret_matches
from memmachine.errors import RateLimitedError


def test_issued_keys_parse_back_and_only_their_secret_matches_the_hash() -> None:
    issued = issue_key("acme", name="bot")
    parsed = parse_key(issued.token)
    assert parsed is not None
    assert parsed.key_id == issued.record.key_id
    assert issued.secret_hash == hashlib.sha256(parsed.secret.encode()).hexdigest()
    assert secret_matches(parsed.secret, issued.secret_hash)
    assert not secret_matches(parsed.secret + "x", issued.secret_hash)
    assert issued.token not in issued.secret_hash
    other = issue_key("acme")
    assert other.record.key_id != issued.record.key_id
    assert other.token != issued.token


@pytest.mark.parametrize(
    "token",
    [
        "",
        "mm_",
        "mm_0123456789abcdef_",
        "xx_0123456789abcdef_s",
        "mm_0123_s",
        "mm_0123456789ABCDEF_s",
    ],
)
def test_anything_but_a_well_formed_key_does_not_parse(token: str) -> None:
    assert parse_key(token) is None


def test_permissions_and_tenant_are_checked() -> None:
    assert issue_key("t", permissions=["admin", "read"]).record.permissions == ("read", "admin")
    with pytest.raises(ValueError, match="unknown permission"):
        issue_key("t", permissions=["root"])
    with pytest.raises(ValueError, match="at least one"):
        issue_key("t", permissions=[])
    with pytest.raises(ValidationError):
        issue_key("two words")
    assert hash_secret("s") == hashlib.sha256(b"s").hexdigest()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_bucket_allows_a_minutes_worth_then_refills_at_the_rate() -> None:
    clock = Clock()
    limiter = InProcessRateLimiter(clock)
    for _ in range(3):
        await limiter.check("k", 3)
    with pytest.raises(RateLimitedError) as raised:
        await limiter.check("k", 3)
    assert raised.value.retry_after == pytest.approx(20.0)
    await limiter.check("other", 3)  # buckets are per key

    clock.now += 20.0  # one request's worth at 3 per minute
    await limiter.check("k", 3)
    with pytest.raises(RateLimitedError):
        await limiter.check("k", 3)
    clock.now += 3600
    for _ in range(3):  # never more than the burst
        await limiter.check("k", 3)
    with pytest.raises(RateLimitedError):
        await limiter.check("k", 3)


async def test_zero_is_unlimited_and_a_forgotten_key_starts_full() -> None:
    limiter = InProcessRateLimiter(Clock())
    for _ in range(1000):
        await limiter.check("k", 0)
    await limiter.check("k", 1)
    with pytest.raises(RateLimitedError):
        await limiter.check("k", 1)
    await limiter.forget("k")
    await limiter.check("k", 1)
