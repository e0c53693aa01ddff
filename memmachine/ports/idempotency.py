"""The idempotency store: the first answer to a write, kept under the caller's key.

A client that sends a write with an ``Idempotency-Key`` and then sends it again (it got no
answer, or a 503/504) must get the first answer again and must not store anything twice.
The store keeps one record per tenant and key: while the first request runs the record is
*pending* (claimed, with a lease); once it answered, the record is *done* and holds the
answer, until it expires.

Contract (checked by ``tests/contract/test_idempotency_store.py``):

* ``claim(tenant, key, fingerprint, lease_seconds)`` is atomic: when no record of
  ``tenant`` + ``key`` exists it writes a pending one (expiring after ``lease_seconds``)
  and returns ``None`` (the caller owns the key); otherwise it returns the record as it is
  and changes nothing. Of any number of concurrent claims of one key exactly one gets
  ``None``.
* ``extend(tenant, key, lease_seconds)`` renews the lease of a pending record (the
  request that claimed it is still running); it does nothing to a done or missing one.
* ``complete(tenant, key, record, ttl_seconds, owners)`` stores the answer (``record.done``
  is true) for ``ttl_seconds``, replacing the pending record, and files it under each of
  ``owners`` (the user and session it was written for, see
  :func:`memmachine.memory.idempotency.owners_of`).
* ``forget(owner)`` drops every record filed under ``owner`` (an answer holds what the
  user sent) and returns how many there were: forgetting a user or session reaches them.
  The index behind it is bounded by the records' own expiry.
* ``release(tenant, key)`` drops the record, so the key may be claimed again (the request
  failed with nothing applied).
* Records of different tenants never meet: the same key of two tenants is two records.
* Keys and fingerprints are stored hashed; answers as given. A backend that fails raises
  ``StoreError`` naming the store (``StoreUnavailableError`` when it cannot be reached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["IdempotencyRecord", "IdempotencyStore"]


@dataclass(frozen=True)
class IdempotencyRecord:
    """One key's record: the request's ``fingerprint`` (a hash of what was sent) and, once
    ``done``, the answer: ``status``, ``body`` and its ``content_type``."""

    fingerprint: str
    done: bool = False
    status: int = 0
    body: bytes = b""
    content_type: str = ""


class IdempotencyStore(Protocol):
    """Records of idempotent writes (see the module docstring)."""

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def claim(
        self, tenant: str, key: str, fingerprint: str, lease_seconds: float
    ) -> IdempotencyRecord | None: ...
    async def extend(self, tenant: str, key: str, lease_seconds: float) -> None: ...
    async def complete(
        self,
        tenant: str,
        key: str,
        record: IdempotencyRecord,
        ttl_seconds: float,
        owners: Sequence[str] = (),
    ) -> None: ...
    async def forget(self, owner: str) -> int: ...
    async def release(self, tenant: str, key: str) -> None: ...
