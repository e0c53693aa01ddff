"""Idempotent writes: a write sent again with the same key is answered, not applied again.

Every interface that takes an ``Idempotency-Key`` (REST's header, MCP's ``idempotency_key``
argument) runs the write through :meth:`IdempotentWrites.run`:

* The first request with a key claims it (a pending record with a lease of
  ``lease_seconds``, renewed while it runs, so a claim whose request died, or whose answer
  was lost, ends within one lease), runs, and keeps its answer for ``ttl_seconds`` when
  the answer is final: a success, or a refusal that a retry would get again (4xx other
  than 401, 403, 408, 409 and 429). An answer that applied nothing (503, a refusal by auth
  or rate limit) releases the key, so a retry runs afresh; so does 504 "outcome unknown",
  whose retry is made safe by the write itself (an add with a key stores its episodes
  under ids derived from the key, so the retry finds them instead of storing them twice).
* A request with a key that holds an answer gets that answer again (same status, same
  body), nothing applied; with another body (``fingerprint``) it is refused with a 422
  naming the header.
* A request with a key whose first request is still running waits for it (up to
  ``wait_seconds``) and gets its answer; after that it is refused with a 409.

Keys are scoped by tenant: two tenants' equal keys never meet. A kept answer holds what the
user sent (a fact's value, a working-memory summary...), so it is filed under the user and
the session the write was for (:func:`owners_of`), and forgetting either drops it
(:meth:`IdempotentWrites.forget`) instead of leaving it until its TTL.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable

from memmachine.errors import ConflictError, InvalidInputError, MemMachineError
from memmachine.models import Scope
from memmachine.ports import IdempotencyRecord, IdempotencyStore

__all__ = [
    "IDEMPOTENCY_HEADER",
    "IdempotentWrites",
    "check_key",
    "episode_ids_for",
    "keeps_answer",
    "owners_of",
]

log = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: What a key may be: 1-255 printable ASCII characters, no spaces.
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_POLL_SECONDS = 0.05

Answer = tuple[int, bytes, str]


def check_key(key: str, field: str = IDEMPOTENCY_HEADER) -> str:
    """``key`` when it is a usable idempotency key, else ``InvalidInputError`` naming
    ``field``."""
    if not _KEY.fullmatch(key):
        raise InvalidInputError(
            f"{field} must be 1-255 printable ASCII characters without spaces", field=field
        )
    return key


def episode_ids_for(tenant: str, key: str, count: int) -> list[str]:
    """The ids of the ``count`` episodes an add with idempotency ``key`` stores: the same on
    every retry, so a retry finds what an earlier attempt stored (``MessageAdder``)."""
    digest = hashlib.sha256(f"{tenant}\0{check_key(key)}".encode()).hexdigest()[:32]
    return [f"ik-{digest}-{index}" for index in range(count)]


def owners_of(scope: Scope) -> list[str]:
    """What a kept answer written for ``scope`` is filed under: its user
    (``tenant/org/project/user``) and, with a session, that session (one more ``/``-part:
    ids cannot contain ``/``)."""
    owners = [scope.user_key]
    if scope.session_id is not None:
        owners.append(f"{scope.user_key}/{scope.session_id}")
    return owners


def keeps_answer(status: int) -> bool:
    """Whether an answer is final, so kept for the key's retries (see the module docstring)."""
    return 200 <= status < 300 or (400 <= status < 500 and status not in _TRANSIENT)


_TRANSIENT = frozenset({401, 403, 408, 409, 429})


class IdempotentWrites:
    """Runs writes once per tenant and key (see the module docstring)."""

    def __init__(
        self,
        store: IdempotencyStore | None,
        *,
        ttl_seconds: float = 86_400,
        lease_seconds: float = 60,
        wait_seconds: float = 30,
    ) -> None:
        self.store = store
        self.ttl_seconds, self.lease_seconds = ttl_seconds, lease_seconds
        self.wait_seconds = wait_seconds

    async def run(
        self,
        tenant: str,
        key: str,
        fingerprint: str,
        write: Callable[[], Awaitable[Answer]],
        *,
        field: str = IDEMPOTENCY_HEADER,
        owner: Callable[[], Scope | None] | None = None,
    ) -> Answer:
        """The answer of ``write`` (``status, body, content type``) run once for ``tenant``
        and ``key``; ``field`` names the key in errors. Without a store, ``write`` runs as
        it is. Errors of ``write`` pass through, with the key released. ``owner`` tells,
        once ``write`` ran, whose write it was (``None``: nobody's, say a refusal before
        the scope was known); the kept answer is filed under it."""
        check_key(key, field)
        if self.store is None:
            return await write()
        stored = await self._claim(tenant, key, fingerprint, field)
        if stored is not None:
            return stored
        renewal = asyncio.create_task(self._renew(tenant, key))
        try:
            answer = await write()
        except BaseException:
            await self._release(tenant, key)
            raise
        finally:
            renewal.cancel()
        status, body, content_type = answer
        if not keeps_answer(status):
            await self._release(tenant, key)
            return answer
        record = IdempotencyRecord(fingerprint, True, status, body, content_type)
        scope = owner() if owner is not None else None
        owners = owners_of(scope) if scope is not None else []
        try:
            await self.store.complete(tenant, key, record, self.ttl_seconds, owners)
        except MemMachineError as exc:
            # The write is applied and answered; its retries wait for the lease to end.
            log.warning("the answer of an idempotent write was not kept: %s", exc.message)
        return answer

    async def forget(self, scope: Scope) -> int:
        """Drop every kept answer of ``scope``'s session, or of its user when it names no
        session; how many there were (0 without a store)."""
        if self.store is None:
            return 0
        return await self.store.forget(owners_of(scope)[-1])

    async def _claim(self, tenant: str, key: str, fingerprint: str, field: str) -> Answer | None:
        assert self.store is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        while True:
            found = await self.store.claim(tenant, key, fingerprint, self.lease_seconds)
            if found is None:
                return None
            if found.fingerprint != fingerprint:
                raise InvalidInputError(
                    f"this {field} was used for a different request; use a new key for "
                    "a new request",
                    field=field,
                )
            if found.done:
                return found.status, found.body, found.content_type
            if loop.time() >= deadline:
                raise ConflictError(
                    f"a request with this {field} is still being processed; retry later"
                )
            await asyncio.sleep(_POLL_SECONDS)

    async def _renew(self, tenant: str, key: str) -> None:
        assert self.store is not None
        while True:
            await asyncio.sleep(self.lease_seconds / 4)
            try:
                await self.store.extend(tenant, key, self.lease_seconds)
            except MemMachineError as exc:
                log.warning("an idempotency lease was not renewed: %s", exc.message)

    async def _release(self, tenant: str, key: str) -> None:
        assert self.store is not None
        try:
            await self.store.release(tenant, key)
        except MemMachineError as exc:
            log.warning("an idempotency key was not released: %s", exc.message)
