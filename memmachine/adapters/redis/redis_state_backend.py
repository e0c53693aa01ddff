"""Agent state on Redis (or any Redis-protocol server), one hash per (scope, name).

Key layout (ids never contain ``:``, ``{`` or ``}`` and are never empty, see
``memmachine.models.ID_PATTERN``; an unset agent, session or group id is the empty string;
the name comes last); ``U`` is the user's hash tag ``{tenant:org:project:user}``::

    {prefix}:state:U                                   set of the user's record keys
    {prefix}:state:U:{agent}:{session}:{group}:{name}  hash: revision, envelope, updated_at

Every write is one Lua script (compare the revision, write, index the key in the user's
set), so concurrent writers are serialised by the server. ``delete_user`` walks the user's
set. Records never expire. Every key of a user carries the user's hash tag, so on a Redis
Cluster (``redis+cluster://``) each script touches one slot.

Upgrading: earlier versions wrote the keys without the hash tag
(``{prefix}:state:{tenant}:{org}:{project}:{user}...``); on a single server :meth:`start`
renames them, rewriting the members of each user's set.
"""

from __future__ import annotations

import json
import re
from typing import Any

from redis.commands.core import AsyncScript

from memmachine.adapters.json_state_backend import JsonStateBackend
from memmachine.adapters.redis.redis_common import (
    MOVE_KEY_FUNCTION,
    KeyMigration,
    RedisClient,
    check_redis_url,
    connect_redis,
    translate_errors,
)
from memmachine.errors import ConfigurationError, StoreError, StoreUnavailableError
from memmachine.models import ID_PATTERN, Scope, utc_now
from memmachine.ports import (
    StateRecord,
    StoredState,
    record_key,
    scope_fields,
    scope_of_key,
    session_of,
    sorted_records,
    stale_revision,
    stored_record,
)

__all__ = ["RedisStateBackend"]

_STORE = "state"

# KEYS[1] = the record, KEYS[2] = the user's set. ARGV[1] = expected revision ('' = none),
# ARGV[2] = envelope JSON, ARGV[3] = updated_at. Returns {new revision} or {-1, current}.
_PUT = """
local current = tonumber(redis.call('HGET', KEYS[1], 'revision') or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= current then
  return {-1, current}
end
redis.call('HSET', KEYS[1], 'revision', current + 1, 'envelope', ARGV[2], 'updated_at', ARGV[3])
redis.call('SADD', KEYS[2], KEYS[1])
return {current + 1}
"""

# KEYS[1] = the record, KEYS[2] = the user's set. Returns 1 when the record existed.
_DELETE = """
redis.call('SREM', KEYS[2], KEYS[1])
return redis.call('DEL', KEYS[1])
"""

# KEYS[1] = the user's set. Returns how many records existed.
_DELETE_USER = """
local removed = 0
for _, key in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  removed = removed + redis.call('DEL', key)
end
redis.call('DEL', KEYS[1])
return removed
"""


# Moves one key of the untagged layout (KEYS = old, new); a user's set also has its
# members (record keys) renamed.
_MIGRATE = (
    MOVE_KEY_FUNCTION
    + """
local moved = move_key(KEYS[1], KEYS[2])
if moved == 1 and redis.call('TYPE', KEYS[2]).ok == 'set' then
  local head = KEYS[1] .. ':'
  for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if string.sub(member, 1, #head) == head then
      redis.call('SREM', KEYS[2], member)
      redis.call('SADD', KEYS[2], KEYS[2] .. ':' .. string.sub(member, #head + 1))
    end
  end
end
return moved
"""
)


class RedisStateBackend(JsonStateBackend):
    """A :class:`~memmachine.ports.StateBackend` on Redis.

    ``url`` is ``redis://``, ``rediss://``, ``unix:///path.sock`` or ``redis+cluster://`` /
    ``rediss+cluster://`` (a Redis Cluster); ``password`` overrides one in the URL;
    ``key_prefix`` (an id) starts every key so deployments and tests can share a server.
    """

    name = _STORE
    kind = "redis"

    def __init__(self, url: str, *, key_prefix: str = "mm", password: str | None = None) -> None:
        check_redis_url(url, "state store")
        if not re.fullmatch(ID_PATTERN, key_prefix):
            raise ConfigurationError(f"state key prefix {key_prefix!r} must match {ID_PATTERN}")
        self._url = url
        self._password = password
        self.key_prefix = key_prefix
        self._client: RedisClient | None = None
        self._put: AsyncScript | None = None
        self._delete: AsyncScript | None = None
        self._delete_user: AsyncScript | None = None

    async def start(self) -> None:
        """Connect, check the server answers and move keys of the untagged layout of
        earlier versions to their tagged names (single server only). Idempotent."""
        if self._client is not None:
            return
        migration = KeyMigration(
            f"{self.key_prefix}:state:[^{{]*", self._tagged_name, script=_MIGRATE
        )
        client = await connect_redis(
            self._url,
            password=self._password,
            label="state store",
            store=_STORE,
            migration=migration,
        )
        self._client = client
        self._put = client.register_script(_PUT)
        self._delete = client.register_script(_DELETE)
        self._delete_user = client.register_script(_DELETE_USER)

    async def close(self) -> None:
        """Close the client and its pool. Safe to call twice."""
        client, self._client = self._client, None
        self._put = self._delete = self._delete_user = None
        if client is not None:
            await client.aclose()

    # ------------------------------------------------------------------ keys

    def _user_key(self, scope: Scope) -> str:
        tag = ":".join(field or "" for field in scope_fields(scope)[:4])
        return f"{self.key_prefix}:state:{{{tag}}}"

    def _key(self, scope: Scope, name: str) -> str:
        return ":".join((self._user_key(scope), *record_key(scope, name)[4:]))

    def _tagged_name(self, key: str) -> str | None:
        """The current name of a key of the untagged layout (a user's set: tenant, org,
        project, user; a record: those, agent, session, group, name), else ``None``."""
        head = f"{self.key_prefix}:state:"
        if not key.startswith(head) or "{" in key:
            return None
        parts = key[len(head) :].split(":")
        if len(parts) not in (4, 8):
            return None
        return ":".join((f"{head}{{{':'.join(parts[:4])}}}", *parts[4:]))

    # ------------------------------------------------------------------ operations

    async def get(self, scope: Scope, name: str) -> StoredState | None:
        client = self._require(self._client)
        with translate_errors("reading state failed", store=_STORE):
            fields = await client.hmget(self._key(scope, name), ["revision", "envelope"])
        revision, raw = fields
        if revision is None or raw is None:
            return None
        try:
            envelope = json.loads(raw)
            number = int(revision)
        except ValueError as exc:
            raise StoreError(f"the stored {name} state is corrupt", _STORE) from exc
        return StoredState(envelope=envelope, revision=number)

    async def _put_text(
        self, scope: Scope, name: str, text: str, expected_revision: int | None
    ) -> int:
        script = self._require(self._put)
        expected = "" if expected_revision is None else str(expected_revision)
        with translate_errors("writing state failed", store=_STORE, write=True):
            reply = await script(
                keys=[self._key(scope, name), self._user_key(scope)],
                args=[expected, text, utc_now().isoformat()],
            )
        if int(reply[0]) == -1:
            assert expected_revision is not None
            raise stale_revision(name, expected_revision, int(reply[1]))
        return int(reply[0])

    async def delete(self, scope: Scope, name: str) -> bool:
        script = self._require(self._delete)
        with translate_errors("deleting state failed", store=_STORE, write=True):
            removed = await script(keys=[self._key(scope, name), self._user_key(scope)])
        return int(removed) > 0

    async def delete_user(self, scope: Scope) -> int:
        script = self._require(self._delete_user)
        with translate_errors("deleting a user's state failed", store=_STORE, write=True):
            removed = await script(keys=[self._user_key(scope)])
        return int(removed)

    async def scopes_holding(self, name: str) -> list[Scope]:
        """The scopes of the record keys one ``SCAN`` finds for ``name``, in key order."""
        client = self._require(self._client)
        head = f"{self.key_prefix}:state:{{"
        found: list[Scope] = []
        with translate_errors("listing state failed", store=_STORE):
            async for key in client.scan_iter(match=f"{head}*}}:*:*:*:{name}", count=1000):
                tag, _, rest = str(key)[len(head) :].partition("}:")
                fields = [*tag.split(":"), *rest.split(":")]
                if len(fields) == 8 and fields[7] == name:
                    found.append(scope_of_key(fields))
        return sorted(found, key=lambda scope: record_key(scope, name))

    async def list_user(self, scope: Scope) -> list[StateRecord]:
        """Every record in the user's set (a key the set names that is gone is skipped)."""
        client = self._require(self._client)
        user = scope.user_scope()
        head = self._user_key(user) + ":"
        with translate_errors("listing a user's state failed", store=_STORE):
            members = sorted(str(key) for key in await client.smembers(self._user_key(user)))
            rows = [await client.hmget(key, ["revision", "envelope"]) for key in members]
        found: list[StateRecord] = []
        for key, (revision, raw) in zip(members, rows, strict=True):
            parts = key[len(head) :].split(":") if key.startswith(head) else []
            if len(parts) != 4:
                raise StoreError(f"the user's state set holds a foreign key {key!r}", _STORE)
            if revision is None or raw is None:
                continue
            agent_id, session_id, group_id, name = parts
            tail = (agent_id, session_id, group_id, name)
            found.append(stored_record(user, tail, revision, raw, _STORE))
        return sorted_records(found)

    async def delete_session(self, scope: Scope) -> int:
        """The user's set names every record key; those whose session part (the second of
        agent, session, group, name) is the session are deleted, each with its entry."""
        session = session_of(scope)
        client, script = self._require(self._client), self._require(self._delete)
        user = self._user_key(scope)
        removed = 0
        with translate_errors("deleting a session's state failed", store=_STORE, write=True):
            for key in await client.smembers(user):
                parts = str(key)[len(user) + 1 :].split(":")
                if len(parts) == 4 and parts[1] == session:
                    removed += int(await script(keys=[str(key), user]))
        return removed

    @staticmethod
    def _require(value: Any) -> Any:
        if value is None:
            raise StoreUnavailableError("the Redis state backend is not started", _STORE)
        return value
