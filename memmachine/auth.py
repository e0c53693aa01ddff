"""API keys: their shape, generation, hashing and parsing.

A key as the caller sees it is ``mm_<key_id>_<secret>``: ``key_id`` is 16 hex digits that
name the key in lists, logs and the store; ``secret`` is 32 random bytes, URL-safe base64.
Only ``sha256(secret)`` is ever stored (see :func:`hash_secret`), so a copy of the database
does not yield a usable key. The full key is shown once, when it is created.

Nothing here touches a database or the network; the store is the
:class:`~memmachine.ports.KeyStore` port and the server decides what a key may reach.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memmachine.models import Identifier, utc_now

__all__ = [
    "KEY_PREFIX",
    "PERMISSIONS",
    "ApiKey",
    "IssuedKey",
    "ParsedKey",
    "Permission",
    "StoredKey",
    "hash_secret",
    "issue_key",
    "parse_key",
    "secret_matches",
]

#: Every generated key starts with ``mm_``.
KEY_PREFIX = "mm"
#: What a key may be allowed: read memories, write (and delete) them, manage keys.
Permission = Literal["read", "write", "admin"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "admin")

_KEY_ID_BYTES = 8
_SECRET_BYTES = 32


class ApiKey(BaseModel):
    """One API key as stored and listed: never its secret, nor the secret's hash.

    ``rate_limit_per_minute`` ``None`` means the server's default
    (``MEMMACHINE_RATE_LIMIT_PER_MINUTE``); ``0`` means unlimited. A key with
    ``revoked_at`` set authenticates nothing."""

    model_config = ConfigDict(frozen=True)

    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    tenant: Identifier
    name: str = Field(default="", max_length=200)
    permissions: tuple[Permission, ...] = ("read", "write")
    rate_limit_per_minute: int | None = Field(default=None, ge=0)
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def can_read(self) -> bool:
        return "read" in self.permissions

    @property
    def can_write(self) -> bool:
        return "write" in self.permissions

    @property
    def is_admin(self) -> bool:
        return "admin" in self.permissions


@dataclass(frozen=True)
class StoredKey:
    """A key's record and the hash of its secret, as a :class:`~memmachine.ports.KeyStore`
    hands them out for verification."""

    key: ApiKey
    secret_hash: str


@dataclass(frozen=True)
class IssuedKey:
    """A freshly generated key: ``token`` is what the caller sends (shown once), ``record``
    and ``secret_hash`` are what is stored."""

    token: str
    record: ApiKey
    secret_hash: str


@dataclass(frozen=True)
class ParsedKey:
    """The two parts of a presented ``mm_<key_id>_<secret>``."""

    key_id: str
    secret: str


def hash_secret(secret: str) -> str:
    """The hex sha256 of ``secret``: what the store keeps instead of the key.

    A single fast hash is enough here, unlike for passwords: the secret is 32 bytes from
    :mod:`secrets` (256 bits), so guessing it from the hash is as hopeless as guessing it
    outright, and slow hashes (bcrypt, argon2) only help low-entropy secrets. A fast hash
    keeps checking a key on every request cheap."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(secret: str, secret_hash: str) -> bool:
    """Whether ``secret`` hashes to ``secret_hash``, compared in constant time."""
    return hmac.compare_digest(hash_secret(secret).encode(), secret_hash.encode())


def _normalise_permissions(permissions: Iterable[str]) -> tuple[Permission, ...]:
    wanted = set(permissions)
    unknown = sorted(wanted - set(PERMISSIONS))
    if unknown:
        raise ValueError(f"unknown permission(s) {unknown}; choose from {list(PERMISSIONS)}")
    if not wanted:
        raise ValueError("a key needs at least one permission")
    return tuple(p for p in PERMISSIONS if p in wanted)


def issue_key(
    tenant: str,
    *,
    name: str = "",
    permissions: Iterable[str] = ("read", "write"),
    rate_limit_per_minute: int | None = None,
    now: datetime | None = None,
) -> IssuedKey:
    """Generate a new key for ``tenant``. Raises ``pydantic.ValidationError`` for an invalid
    tenant, name or rate limit and ``ValueError`` for unknown permissions."""
    key_id = secrets.token_hex(_KEY_ID_BYTES)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    record = ApiKey(
        key_id=key_id,
        tenant=tenant,
        name=name,
        permissions=_normalise_permissions(permissions),
        rate_limit_per_minute=rate_limit_per_minute,
        created_at=now or utc_now(),
    )
    return IssuedKey(
        token=f"{KEY_PREFIX}_{key_id}_{secret}", record=record, secret_hash=hash_secret(secret)
    )


def parse_key(token: str) -> ParsedKey | None:
    """Split ``mm_<key_id>_<secret>``; ``None`` for anything else."""
    prefix, _, rest = token.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or len(key_id) != 2 * _KEY_ID_BYTES or not secret:
        return None
    if any(c not in "0123456789abcdef" for c in key_id):
        return None
    return ParsedKey(key_id=key_id, secret=secret)
