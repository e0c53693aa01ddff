"""Working memory on Redis (redis-py asyncio): Redis, or the embedded FalkorDB's redis-server.

Key layout (ids never contain ``:``, ``{`` or ``}``, see ``memmachine.models.ID_PATTERN``);
``U`` is the user's hash tag ``{tenant:org:project:wm:user}``::

    {prefix}:U:{session}:messages   list of message JSON
    {prefix}:U:{session}:meta       hash: version, state, summary, updated_at
    {prefix}:U:sessions             set of the user's session ids

Every key of a user carries the user's hash tag, so on a Redis Cluster
(``redis+cluster://``) all of a user's sessions live in one slot and every script and
transaction below touches one slot only; users spread over the cluster's nodes.

A session exists while its ``meta`` hash does (every write sets ``version`` there). Every write
is one Lua script: it bumps ``version``, sets ``updated_at``, applies the change, adds the
session to the user's set and (re)sets the TTL of the session's keys; the user's set keeps a
TTL at least as long as any of its sessions (none when one session is persistent). Sessions
that expired on their own stay listed in the set until ``delete_user`` or the set's own
expiry; they cost a few bytes and are never counted.

``agent_id`` and ``group_id`` of the scope are not part of a session's identity: a session is
(tenant, org, project, user, session).

Listing users (``list_users``) finds the project's users by their session sets with one
``SCAN`` over the server's keys (every node of a cluster): its cost grows with the keys the
server holds, which suits an inspector, not a hot path; no write pays for it.

Upgrading: earlier versions wrote the same keys without the hash tag
(``{prefix}:{tenant}:{org}:{project}:wm:{user}:...``). On a single server, :meth:`start`
renames every such key to its tagged name (TTLs kept; see ``redis_common.migrate_keys``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast

from redis.commands.core import AsyncScript

from memmachine.adapters.redis.redis_common import (
    DEFAULT_SOCKET_TIMEOUT_SECONDS,
    KeyMigration,
    RedisClient,
    check_redis_url,
    connect_redis,
    describe_error,
    redis_health,
    translate_errors,
)
from memmachine.adapters.redis.redis_compactor import RedisCompactor
from memmachine.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    StoreError,
)
from memmachine.models import (
    ID_PATTERN,
    ProjectScope,
    Scope,
    StoreHealth,
    UserActivity,
    WorkingMemory,
    WorkingMessage,
    utc_now,
)
from memmachine.ports import Lifecycle, page_of_projects

__all__ = ["RedisWorkingMemoryStore"]

_STORE = "working"

# Shared tail of every write script. KEYS: meta, messages, user's session set.
# ARGV[1] = TTL in ms ('' = persistent), ARGV[2] = updated_at, ARGV[3] = session id.
# Returns {version, message_count, pttl, state, summary}.
_FINISH_WRITE = """
local function push_messages(first)
  for i = first, #ARGV, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end

local function finish(version)
  local ttl = tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'version', version, 'updated_at', ARGV[2])
  local index_ttl = redis.call('PTTL', KEYS[3])
  redis.call('SADD', KEYS[3], ARGV[3])
  if ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
    if index_ttl == -2 or (index_ttl >= 0 and index_ttl < ttl) then
      redis.call('PEXPIRE', KEYS[3], ttl)
    end
  else
    redis.call('PERSIST', KEYS[1])
    redis.call('PERSIST', KEYS[2])
    redis.call('PERSIST', KEYS[3])
  end
  local meta = redis.call('HMGET', KEYS[1], 'state', 'summary')
  return {version, redis.call('LLEN', KEYS[2]), redis.call('PTTL', KEYS[1]), meta[1], meta[2]}
end
"""

# ARGV[4..] = messages (JSON).
_APPEND = (
    _FINISH_WRITE
    + """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0') + 1
push_messages(4)
return finish(version)
"""
)

# ARGV[4] = expected version ('' = none), ARGV[5]/[6] = '1' + state JSON to replace it,
# ARGV[7]/[8] = '1' + summary to replace it, ARGV[9] = '1' to replace the messages with
# ARGV[10..]. A stale expected version returns {-1, current version} and changes nothing.
_PUT = (
    _FINISH_WRITE
    + """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= current then
  return {-1, current}
end
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'state', ARGV[6]) end
if ARGV[7] == '1' then redis.call('HSET', KEYS[1], 'summary', ARGV[8]) end
if ARGV[9] == '1' then
  redis.call('DEL', KEYS[2])
  push_messages(10)
end
return finish(current + 1)
"""
)

# KEYS[1] = the user's session set, ARGV[1] = the user's key (sessions live under it).
# Returns how many sessions still existed.
_DELETE_USER = """
local removed = 0
for _, session in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local base = ARGV[1] .. ':' .. session
  removed = removed + redis.call('DEL', base .. ':meta')
  redis.call('DEL', base .. ':messages')
end
redis.call('DEL', KEYS[1])
return removed
"""


class RedisWorkingMemoryStore(Lifecycle):
    """:class:`~memmachine.ports.WorkingMemoryStore` on Redis.

    ``url`` is ``redis://``, ``rediss://``, ``unix:///path.sock`` (the embedded FalkorDB
    server) or ``redis+cluster://`` / ``rediss+cluster://`` (a Redis Cluster through any
    of its nodes); ``password`` overrides one in the URL. ``key_prefix`` starts every key so that
    deployments can share a server. ``max_connections`` bounds the connection pool.
    """

    name = _STORE
    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "mm",
        max_connections: int = 50,
        password: str | None = None,
        timeout_seconds: float = DEFAULT_SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        check_redis_url(url, "working store")
        if not re.fullmatch(ID_PATTERN, key_prefix):
            raise ConfigurationError(
                f"working store key prefix {key_prefix!r} must match {ID_PATTERN}"
            )
        if max_connections < 1:
            raise ConfigurationError("working store max_connections must be >= 1")
        self._url = url
        self._prefix = key_prefix
        self._max_connections = max_connections
        self._password = password
        self._timeout = timeout_seconds
        self._client: RedisClient | None = None
        self._append: AsyncScript | None = None
        self._put: AsyncScript | None = None
        self._delete_user: AsyncScript | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, check the server answers and move keys of the untagged layout of
        earlier versions to their tagged names (single server only). Idempotent."""
        if self._client is not None:
            return
        client = await connect_redis(
            self._url,
            password=self._password,
            label="working store",
            store=_STORE,
            max_connections=self._max_connections,
            socket_timeout=self._timeout,
            migration=KeyMigration(f"{self._prefix}:[^{{]*:wm:*", self._tagged_name),
        )
        self._client = client
        self._append = client.register_script(_APPEND)
        self._put = client.register_script(_PUT)
        self._delete_user = client.register_script(_DELETE_USER)

    async def close(self) -> None:
        """Close the client and its pool. Safe to call twice."""
        client, self._client = self._client, None
        self._append = self._put = self._delete_user = None
        if client is not None:
            await client.aclose()

    def compactor(self) -> RedisCompactor:
        """What rewrites the server's files after a forget (see :class:`RedisCompactor`)."""
        return RedisCompactor(self._url, name="working", password=self._password)

    async def health(self) -> StoreHealth:
        """PING and ``INFO server``: Redis version and round-trip latency. Never raises."""
        return await redis_health(self, self._client, detail=f"prefix {self._prefix}")

    # ------------------------------------------------------------------ reads

    async def get(
        self, scope: Scope, *, last_n: int | None = None, offset: int = 0, limit: int | None = None
    ) -> WorkingMemory | None:
        """The session, or ``None``; messages oldest first, either the newest ``last_n`` or
        the page ``[offset:offset + limit]`` (one LRANGE inside the read transaction)."""
        start, stop = _window(last_n, offset, limit)
        client = self._require_client()
        meta_key, messages_key = self._session_keys(scope)
        with _translate("read the session"):
            async with client.pipeline(transaction=True) as pipe:
                pipe.hgetall(meta_key)
                pipe.llen(messages_key)
                pipe.pttl(meta_key)
                if start is not None:
                    pipe.lrange(messages_key, start, stop)
                replies = await pipe.execute()
        meta: dict[str, str] = replies[0]
        if not meta:
            return None
        count = int(replies[1])
        first = max(count + start, 0) if start is not None and start < 0 else (start or 0)
        with _corrupt_data_guard(scope):
            return WorkingMemory(
                scope=scope,
                messages=[
                    WorkingMessage.model_validate_json(raw)
                    for raw in (replies[3] if start is not None else [])
                ],
                message_count=count,
                first_index=min(first, count),
                state=_load_state(meta.get("state")),
                summary=meta.get("summary"),
                version=int(meta.get("version", 0)),
                ttl_seconds=_ttl_seconds(int(replies[2])),
                updated_at=_load_time(meta.get("updated_at")),
            )

    # ------------------------------------------------------------------ writes

    async def append(
        self, scope: Scope, messages: Sequence[WorkingMessage], *, ttl_seconds: int | None
    ) -> WorkingMemory:
        """Append ``messages`` atomically (one script); creates the session when missing."""
        script = self._require_script(self._append)
        keys = self._write_keys(scope)
        now = utc_now()
        args = [*self._write_args(scope, now, ttl_seconds), *_dump_messages(messages)]
        with _translate("append to the session", write=True):
            reply = await script(keys=keys, args=args)
        with _corrupt_data_guard(scope):
            return _written(scope, now, reply)

    async def put(
        self,
        scope: Scope,
        *,
        messages: Sequence[WorkingMessage] | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
        ttl_seconds: int | None,
    ) -> WorkingMemory:
        """Replace whichever of messages / state / summary is given; compare-and-set on
        ``expected_version`` (0 = the session must not exist), else :class:`ConflictError`."""
        if expected_version is not None and expected_version < 0:
            raise InvalidInputError(
                f"expected_version must be >= 0, got {expected_version}",
                field="expected_version",
            )
        script = self._require_script(self._put)
        keys = self._write_keys(scope)
        now = utc_now()
        args = [
            *self._write_args(scope, now, ttl_seconds),
            "" if expected_version is None else str(expected_version),
            *(("0", "") if state is None else ("1", _dump_state(state))),
            *(("0", "") if summary is None else ("1", summary)),
            "0" if messages is None else "1",
            *_dump_messages(messages or ()),
        ]
        with _translate("write the session", write=True):
            reply = await script(keys=keys, args=args)
        if int(reply[0]) < 0:
            current = int(reply[1])
            raise ConflictError(
                f"session {scope.session_id!r} is at version {current}, not {expected_version}",
                current_version=current,
            )
        with _corrupt_data_guard(scope):
            return _written(scope, now, reply)

    async def delete(self, scope: Scope) -> int:
        """Remove the session; 1 when it existed, else 0."""
        client = self._require_client()
        meta_key, messages_key = self._session_keys(scope)
        with _translate("delete the session", write=True):
            async with client.pipeline(transaction=True) as pipe:
                pipe.delete(meta_key)
                pipe.delete(messages_key)
                pipe.srem(self._index_key(scope), scope.session_id or "")
                replies = await pipe.execute()
        return int(replies[0])

    async def delete_user(self, scope: Scope) -> int:
        """Remove every session of the user (one script); how many existed."""
        script = self._require_script(self._delete_user)
        with _translate("delete the user's sessions", write=True):
            reply = await script(keys=[self._index_key(scope)], args=[self._user_key(scope)])
        return int(reply)

    # ------------------------------------------------------------------ inspection

    async def list_sessions(self, scope: Scope) -> list[WorkingMemory]:
        """Every existing session of the user, without messages, most recently written
        first: the user's session set, then one pipelined read of each session (all of a
        user's keys share one slot)."""
        client = self._require_client()
        user = scope.user_scope()
        with _translate("list the user's sessions"):
            members = sorted(cast(set[str], await client.smembers(self._index_key(user))))
            async with client.pipeline(transaction=False) as pipe:
                for session_id in members:
                    meta_key, messages_key = self._session_keys(user.for_session(session_id))
                    pipe.hgetall(meta_key)
                    pipe.llen(messages_key)
                    pipe.pttl(meta_key)
                replies = await pipe.execute()
        sessions: list[WorkingMemory] = []
        for position, session_id in enumerate(members):
            meta, count, pttl = replies[3 * position : 3 * position + 3]
            if not meta:
                continue  # expired or deleted since it was listed
            session = user.for_session(session_id)
            with _corrupt_data_guard(session):
                sessions.append(
                    WorkingMemory(
                        scope=session,
                        message_count=int(count),
                        state=_load_state(meta.get("state")),
                        summary=meta.get("summary"),
                        version=int(meta.get("version", 0)),
                        ttl_seconds=_ttl_seconds(int(pttl)),
                        updated_at=_load_time(meta.get("updated_at")),
                    )
                )
        sessions.sort(key=lambda memory: memory.scope.session_id or "")
        sessions.sort(key=lambda memory: memory.updated_at or _EPOCH, reverse=True)
        return sessions

    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]:
        """The project's users with a live session: their session sets found by one
        ``SCAN`` (see the module docstring), in code-point order, each user's sessions
        read until ``limit`` users have one."""
        if limit < 1:
            return []
        client = self._require_client()
        head = f"{self._prefix}:{{{project.tenant}:{project.org_id}:{project.project_id}:wm:"
        tail = "}:sessions"
        found: set[str] = set()
        with _translate("list users"):
            async for key in client.scan_iter(match=f"{head}{prefix or ''}*{tail}", count=1000):
                user_id = str(key)[len(head) : -len(tail)]
                if re.fullmatch(ID_PATTERN, user_id) and (after is None or user_id > after):
                    found.add(user_id)
        users: list[UserActivity] = []
        for user_id in sorted(found):
            sessions = await self.list_sessions(project.user(user_id))
            if not sessions:
                continue
            latest = [s.updated_at for s in sessions if s.updated_at is not None]
            users.append(
                UserActivity(
                    user_id=user_id,
                    working_sessions=len(sessions),
                    last_active=max(latest) if latest else None,
                )
            )
            if len(users) == limit:
                break
        return users

    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]:
        """The projects of the session sets one ``SCAN`` finds, each kept when
        ``list_users`` finds a live session in it."""
        if limit < 1:
            return []
        client = self._require_client()
        head, tail = f"{self._prefix}:{{", "}:sessions"
        found: set[tuple[str, str, str]] = set()
        with _translate("list projects"):
            async for key in client.scan_iter(match=f"{head}*:wm:*{tail}", count=1000):
                parts = str(key)[len(head) : -len(tail)].split(":")
                if len(parts) == 5 and parts[3] == "wm":
                    found.add((parts[0], parts[1], parts[2]))
        projects: list[ProjectScope] = []
        for project in page_of_projects(found, after, len(found)):
            if await self.list_users(project, limit=1):
                projects.append(project)
                if len(projects) == limit:
                    break
        return projects

    # ------------------------------------------------------------------ keys

    def _user_key(self, scope: Scope) -> str:
        tag = f"{scope.tenant}:{scope.org_id}:{scope.project_id}:wm:{scope.user_id}"
        return f"{self._prefix}:{{{tag}}}"

    def _tagged_name(self, key: str) -> str | None:
        """The current name of a key of the untagged layout, or ``None`` for any other key
        (``{prefix}:{t}:{o}:{p}:wm:{u}:sessions`` or ``...:wm:{u}:{session}:meta|messages``)."""
        head = f"{self._prefix}:"
        if not key.startswith(head):
            return None
        parts = key[len(head) :].split(":")
        shaped = (len(parts) == 6 and parts[5] == "sessions") or (
            len(parts) == 7 and parts[6] in ("meta", "messages")
        )
        if not shaped or parts[3] != "wm" or "{" in key:
            return None
        return f"{head}{{{':'.join(parts[:5])}}}:{':'.join(parts[5:])}"

    def _index_key(self, scope: Scope) -> str:
        return f"{self._user_key(scope)}:sessions"

    def _session_keys(self, scope: Scope) -> tuple[str, str]:
        """(meta, messages) of ``scope.session_id``; ``InvalidInputError`` without one."""
        if scope.session_id is None:
            raise InvalidInputError(
                "working memory needs scope.session_id", field="scope.session_id"
            )
        base = f"{self._user_key(scope)}:{scope.session_id}"
        return f"{base}:meta", f"{base}:messages"

    def _write_keys(self, scope: Scope) -> list[str]:
        return [*self._session_keys(scope), self._index_key(scope)]

    @staticmethod
    def _write_args(scope: Scope, now: datetime, ttl_seconds: int | None) -> list[str]:
        if ttl_seconds is not None and ttl_seconds < 1:
            raise InvalidInputError(
                f"ttl_seconds must be >= 1 or None, got {ttl_seconds}", field="ttl_seconds"
            )
        ttl_ms = "" if ttl_seconds is None else str(ttl_seconds * 1000)
        return [ttl_ms, now.isoformat(), scope.session_id or ""]

    # ------------------------------------------------------------------ plumbing

    def _require_client(self) -> RedisClient:
        if self._client is None:
            raise StoreError("working store is not started", store=_STORE)
        return self._client

    def _require_script(self, script: AsyncScript | None) -> AsyncScript:
        self._require_client()
        assert script is not None  # registered together with the client
        return script


# ---------------------------------------------------------------------- helpers


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _window(last_n: int | None, offset: int, limit: int | None) -> tuple[int | None, int]:
    """LRANGE bounds for a read: ``(start, stop)``, or ``(None, 0)`` when no message is
    wanted. Negative numbers are refused naming the field."""
    for name, value in (("last_n", last_n), ("offset", offset), ("limit", limit)):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must be >= 0, got {value}", field=name)
    if last_n is not None:
        if offset or limit is not None:
            raise InvalidInputError("give last_n or offset/limit, not both", field="last_n")
        return (None, 0) if last_n == 0 else (-last_n, -1)
    if limit == 0:
        return None, 0
    return offset, -1 if limit is None else offset + limit - 1


def _dump_messages(messages: Sequence[WorkingMessage]) -> list[str]:
    return [message.model_dump_json() for message in messages]


def _dump_state(state: dict[str, Any]) -> str:
    try:
        return json.dumps(state, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"state is not JSON: {exc}", field="state") from exc


def _load_state(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def _load_time(raw: str | None) -> datetime | None:
    return datetime.fromisoformat(raw) if raw else None


def _ttl_seconds(pttl: int) -> int | None:
    """Whole seconds left, rounded up; ``None`` for a key without expiry (or gone)."""
    return math.ceil(pttl / 1000) if pttl >= 0 else None


def _written(scope: Scope, now: datetime, reply: list[Any]) -> WorkingMemory:
    """The session after a write script: ``{version, count, pttl, state, summary}``."""
    version, count, pttl, state, summary = reply
    return WorkingMemory(
        scope=scope,
        messages=[],
        message_count=int(count),
        state=_load_state(state),
        summary=summary,
        version=int(version),
        ttl_seconds=_ttl_seconds(int(pttl)),
        updated_at=now,
    )


@contextmanager
def _corrupt_data_guard(scope: Scope) -> Iterator[None]:
    """Data this store did not write (or a foreign key clash) is a store failure."""
    try:
        yield
    except ValueError as exc:
        raise StoreError(
            f"working memory of session {scope.session_id!r} is unreadable: {describe_error(exc)}",
            store=_STORE,
        ) from exc


@contextmanager
def _translate(action: str, *, write: bool = False) -> Iterator[None]:
    """Turn redis-py exceptions into the error tree (see
    :func:`~memmachine.adapters.redis.redis_common.translate_errors`); let ours through."""
    with translate_errors(f"working store could not {action}", store=_STORE, write=write):
        yield
