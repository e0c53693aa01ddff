"""Who may call the server: the API keys it accepts, whether a key is required at all, and
each key's rate limit.

Three sources of keys: the key store (``memmachine keys create`` or ``/v1/admin/keys``),
the static ``MEMMACHINE_API_KEYS`` (read + write for their tenant) and
``MEMMACHINE_ADMIN_KEY`` (manages keys of every tenant, reads and writes no memories).

The :class:`Keyring` keeps the store's active keys (ids and secret hashes, never keys) in
memory, so checking a request needs no database round trip and works from synchronous code
(:func:`memmachine_server.scope.authenticate`). It re-reads the store every
``MEMMACHINE_KEY_REFRESH_SECONDS``, and looks up (by id) a well-formed key that a request
presents and it does not know, so a key made by the CLI works at once and a revoked one
stops within that interval.

``MEMMACHINE_AUTH`` decides whether a request without a key is served (see
:meth:`Keyring.requires_key`); a presented key is always checked, in every mode. Open mode
is only ever a starting state: once a server has had a key (this run, or a revoked one in
its key store), revoking the last key does not open it again.

Rate limits are spent through a :class:`~memmachine.ports.RateLimiter`: the composition
root's choice (:func:`memmachine.bootstrap.build_rate_limiter`: on Redis when one is
configured, so every replica spends from one bucket per key), else one in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
from dataclasses import dataclass

from memmachine.adapters.inprocess.in_process_rate_limiter import InProcessRateLimiter
from memmachine.auth import StoredKey, parse_key, secret_matches
from memmachine.config import Settings
from memmachine.errors import AuthenticationError, MemMachineError
from memmachine.ports import KeyStore, RateLimiter

__all__ = ["Keyring", "Principal", "is_loopback", "open_mode_refusal"]

log = logging.getLogger("memmachine.server")

_CREATE_HINT = "`memmachine keys create --tenant NAME`"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant their key belongs to and what the key may do.

    In open mode (no key required, none presented) every caller is the ``default`` tenant
    and may read and write. ``all_tenants`` marks ``MEMMACHINE_ADMIN_KEY``, which manages
    the keys of every tenant."""

    tenant: str
    key_id: str | None = None
    can_read: bool = True
    can_write: bool = True
    is_admin: bool = False
    all_tenants: bool = False
    #: The key's own requests per minute; ``None`` = the server's default.
    rate_limit: int | None = None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) only accepts connections from this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _StaticKey:
    digest: str
    tenant: str
    key_id: str


class Keyring:
    """The keys a server accepts and the rule for requests without one.

    ``store`` ``None`` = only the static and admin keys of ``settings``; ``limiter``
    ``None`` = rate limits in this process. Call :meth:`start` (starts the limiter, loads
    the store's keys, then re-reads them in the background) and :meth:`close`."""

    def __init__(
        self,
        settings: Settings,
        store: KeyStore | None,
        *,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.limiter: RateLimiter = limiter or InProcessRateLimiter()
        self.mode = settings.auth
        self.loopback = is_loopback(settings.host)
        self._static = [
            _StaticKey(_digest(key), tenant, f"static-{_digest(key)[:12]}")
            for key, tenant in settings.api_key_tenants().items()
            if key
        ]
        admin = settings.admin_key.get_secret_value().strip() if settings.admin_key else ""
        self._admin_digest = _digest(admin) if admin else None
        self._active: dict[str, StoredKey] = {}
        #: Whether a key was ever accepted: the server then never serves open again.
        self._had_keys = bool(self._static or self._admin_digest)
        self._refresh_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the store, load its active keys, log (loudly when open) how requests
        without a key are treated, and re-read the store every ``key_refresh_seconds``
        until :meth:`close`."""
        await self.limiter.start()
        if self.store is not None:
            await self.store.start()
            await self.refresh()
            if not self._had_keys and await self.store.list_keys():
                self._had_keys = True  # only revoked keys: they were required once
            self._task = asyncio.create_task(self._refresh_forever(), name="memmachine-keyring")
        self._log_mode()

    async def close(self) -> None:
        """Stop re-reading and close the store. Safe to call twice."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.store is not None:
            await self.store.close()
        await self.limiter.close()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.key_refresh_seconds)
            try:
                await self.refresh()
            except MemMachineError as exc:
                log.warning("could not re-read the API keys (keeping the last ones): %s", exc)

    async def refresh(self) -> None:
        """Replace the cached keys by the store's active ones now."""
        if self.store is None:
            return
        async with self._refresh_lock:
            before = self.requires_key()
            keys = await self.store.active_keys()
            previous, self._active = self._active, {k.key.key_id: k for k in keys}
            self._had_keys = self._had_keys or bool(self._active)
            for key_id in previous.keys() - self._active.keys():
                await self.limiter.forget(key_id)  # revoked elsewhere
            if self._task is not None and before != self.requires_key():
                log.warning("an API key now exists: every /v1 request needs a key from now on")
            elif self._task is not None and previous and not self._active and self.mode == "auto":
                log.warning(
                    "no active API key is left: requests still need one (a server that had "
                    "keys never serves open again; create a key with %s)",
                    _CREATE_HINT,
                )

    async def refresh_for(self, token: str) -> None:
        """Look ``token``'s key up in the store when it looks like a stored key this
        process does not know yet (made by the CLI a moment ago): one read by primary key."""
        if self.store is None:
            return
        parsed = parse_key(token)
        if parsed is None or parsed.key_id in self._active:
            return
        stored = await self.store.get(parsed.key_id)
        if stored is not None and stored.key.active:
            was_open = not self.requires_key()
            self._active[parsed.key_id] = stored
            self._had_keys = True
            if was_open and self.requires_key():
                log.warning("an API key now exists: every /v1 request needs a key from now on")

    # ------------------------------------------------------------------ decisions

    def has_keys(self) -> bool:
        """Whether any key can authenticate: static, admin or an active stored key."""
        return bool(self._static or self._admin_digest or self._active)

    def requires_key(self) -> bool:
        """Whether a request without a key is refused.

        ``on``: always. ``off``: never. ``auto``: once any key exists, and from then on even
        when every key is revoked (open mode is only ever how a server starts); before any,
        only on a loopback bind address (a server bound elsewhere with no key refuses every
        request rather than serve it open; ``memmachine serve`` refuses to start that way)."""
        if self.mode == "on":
            return True
        if self.mode == "off":
            return False
        return self._had_keys or self.has_keys() or not self.loopback

    def identify(self, token: str) -> Principal:
        """The principal behind a presented key (nothing is spent: see :meth:`spend`).
        Raises AuthenticationError for a key nobody issued or one revoked."""
        digest = _digest(token)
        if self._admin_digest is not None and hmac.compare_digest(digest, self._admin_digest):
            return Principal(
                tenant="default",
                key_id="admin",
                can_read=False,
                can_write=False,
                is_admin=True,
                all_tenants=True,
            )
        parsed = parse_key(token)
        if parsed is not None:
            stored = self._active.get(parsed.key_id)
            if stored is not None and secret_matches(parsed.secret, stored.secret_hash):
                key = stored.key
                return Principal(
                    tenant=key.tenant,
                    key_id=key.key_id,
                    can_read=key.can_read,
                    can_write=key.can_write,
                    is_admin=key.is_admin,
                    rate_limit=key.rate_limit_per_minute,
                )
        for static in self._static:
            if hmac.compare_digest(digest, static.digest):
                return Principal(tenant=static.tenant, key_id=static.key_id)
        raise AuthenticationError("unknown or revoked API key")

    async def spend(self, principal: Principal) -> None:
        """Spend one request of the principal's key: its own limit, else
        ``MEMMACHINE_RATE_LIMIT_PER_MINUTE``. RateLimitedError when it is over; a caller
        without a key (open mode) is not limited."""
        if principal.key_id is None:
            return
        limit = (
            self.settings.rate_limit_per_minute
            if principal.rate_limit is None
            else principal.rate_limit
        )
        await self.limiter.check(principal.key_id, limit)

    async def forget(self, key_id: str) -> None:
        """Stop accepting ``key_id`` in this process at once (it was just revoked)."""
        self._active.pop(key_id, None)
        await self.limiter.forget(key_id)

    def remember(self, stored: StoredKey) -> None:
        """Accept a key created in this process at once."""
        self._active[stored.key.key_id] = stored
        self._had_keys = True

    # ------------------------------------------------------------------ logging

    def _open_reason(self) -> str:
        if self.mode == "off":
            return (
                "authentication is OFF (MEMMACHINE_AUTH=off): requests without a key are "
                "served as tenant 'default' with full access"
            )
        if self.loopback:
            return (
                f"serving OPEN without authentication on loopback {self.settings.host} (local "
                f"development): requests without a key are tenant 'default'; create a key "
                f"with {_CREATE_HINT} to require keys"
            )
        return (
            f"{self.settings.host} is not a loopback address, so every /v1 request is refused "
            f"until a key exists ({_CREATE_HINT}) or MEMMACHINE_AUTH=off"
        )

    def _log_mode(self) -> None:
        if self.mode == "off":
            log.warning("%s", self._open_reason())
        elif not self.has_keys():
            if self.mode == "auto" and self._had_keys:
                log.warning(
                    "every API key in the key store is revoked: requests still need a key "
                    "(create one with %s, or set MEMMACHINE_AUTH=off to serve open)",
                    _CREATE_HINT,
                )
            elif self.mode == "on":
                log.warning(
                    "MEMMACHINE_AUTH=on but no API key exists: every /v1 request is refused "
                    "until one is created (%s)",
                    _CREATE_HINT,
                )
            elif self.loopback:
                log.warning("no API key exists: %s", self._open_reason())
            else:
                log.error("no API key exists: %s", self._open_reason())
        else:
            log.info(
                "API keys required (MEMMACHINE_AUTH=%s): %d stored, %d static, admin key %s",
                self.mode,
                len(self._active),
                len(self._static),
                "set" if self._admin_digest else "unset",
            )


async def open_mode_refusal(settings: Settings, store: KeyStore) -> str | None:
    """Why ``memmachine serve`` must not start with these settings, or ``None``.

    It refuses exactly when it would serve open on a non-loopback address: ``auto`` mode,
    no static or admin key, and no active key in ``store`` (which this opens and closes)."""
    keyring = Keyring(settings, None)
    if settings.auth != "auto" or keyring.loopback or keyring.has_keys():
        return None
    try:
        async with asyncio.timeout(settings.startup_timeout_seconds or 10.0):
            await store.start()
            found = await store.any_active()
    except MemMachineError as exc:
        return f"cannot check for API keys: {exc.message}"
    except TimeoutError:
        return "cannot check for API keys: the key store did not answer in time"
    finally:
        await store.close()
    if found:
        return None
    return (
        f"refusing to serve without authentication on {settings.host}, which is not a loopback "
        f"address: no API key exists; create one with {_CREATE_HINT}, or set "
        "MEMMACHINE_AUTH=off to serve open on purpose"
    )
