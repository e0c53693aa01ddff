"""Background jobs on Redis (redis-py asyncio): Redis, or the embedded FalkorDB's redis-server.

Design: sorted sets, not streams. A stream's consumer group hands out entries in arrival
order and tracks pending ones, but a retry that must wait (exponential backoff) has no place
in it; it would need a second delayed structure anyway, and idempotency, per-user listing
and the dead-letter list are separate keys either way. A sorted set scored by
``available_at`` is a queue that holds delayed jobs naturally: "claimable" is a score range,
FIFO is score order (ties broken by the sequential, zero-padded job id). Durability is the
server's: Redis persistence in production, AOF + RDB on the embedded server.

Key layout (``P`` = ``{<key_prefix>:jobs}``, the queue's hash tag; ids never contain ``:``)::

    P:seq                                   counter behind job ids (j000000000000042)
    P:job:{id}                              hash: the job (see _FIELDS) + owner, worker, lease
    P:kinds                                 set of kinds ever enqueued
    P:queued:{kind}                         zset id -> available_at (ms): claimable from then
    P:running                               zset id -> lease deadline (ms)
    P:expiring                              zset id -> when the done job is removed (ms)
    P:dead                                  zset id -> seq: every dead job (for ``stats``)
    P:dead_indexed                          set once ``P:dead`` holds the dead jobs of
                                            versions that did not keep it (see ``start``)
    P:u:{tenant}:{org}:{project}:{user}:idem           hash idempotency key -> id
    P:u:{tenant}:{org}:{project}:{user}:all            zset id -> seq (every job of the user)
    P:u:{tenant}:{org}:{project}:{user}:{status}       zset id -> seq, one per status

State machine (every transition is one Lua script, so atomic; times are the server's clock,
so workers on other machines agree on leases)::

    enqueue ─► queued ──claim──► running ──complete──► done
                 ▲                  │
                 │   fail, attempts < max (available_at = now + backoff)
                 ├──────────────────┤
                 │   lease expired, attempts < max (reclaimed inside claim)
                 │                  │
                 │                  └── fail / lease expired, attempts = max ──► dead
                 └──────────────── replay (attempts reset) ◄───────────────────── dead

``claim`` first moves every running job whose lease passed back to ``queued`` (or ``dead``
when that was its last attempt, ``last_error`` naming the lost worker), so no reaper process
is needed. A worker still holds its lease after the deadline until another ``claim`` reclaims
it; once reclaimed, its ``complete``/``fail`` is refused with :class:`ConflictError`, so a
job is completed at most once. Backoff after the n-th failed attempt is full jitter:
uniform in ``[0, min(backoff_max, backoff_base * 2**(n-1))]``.

``stats`` counts without reading jobs: ``ZCARD`` of each kind's ``queued`` set, of
``running`` and of ``dead``. Every status change goes through the scripts' ``move`` (and
every removal through ``forget``), which keep ``P:dead`` in step.

Jobs are confined to the user key of their scope (tenant, org, project, user): an
idempotency key is unique per user, and ``get``/``list_jobs``/``replay``/``purge_dead``
never see another user's jobs.

Retention: with ``done_retention_seconds``, a done job is gone that long after it finished
(``get`` and ``list_jobs`` stop returning it at once; ``claim``, ``enqueue`` and
``complete`` delete such jobs and their index entries, a hundred at a time, and its
idempotency key is free again). Without it done jobs are kept. Dead jobs are kept until
replayed or purged (``purge_dead``).

Redis Cluster: every key carries the queue's hash tag, so the whole queue lives in one
slot (one node: a claim must see every kind and every lease at once) and every script
declares ``P:seq`` so that a cluster client sends it to that node. Other queues (other
prefixes) land on other slots.

Upgrading: earlier versions named the keys ``<key_prefix>:jobs:...`` (no hash tag). On a
single server :meth:`start` renames them to the tagged names (see ``migrate_keys``),
rewriting each job's owner key, so queued, running, dead and done jobs carry over; done
jobs get the retention counted from when they finished.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast, get_args

from redis.commands.core import AsyncScript

from memmachine.adapters.redis.redis_common import (
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
    NotFoundError,
    StoreError,
)
from memmachine.models import ID_PATTERN, Scope, StoreHealth
from memmachine.ports import Job, JobQueueStats, JobStatus, Lifecycle
from memmachine.telemetry import REQUEST_ID_PATTERN

__all__ = ["RedisJobQueue", "backoff_ceiling_seconds"]

_STORE = "jobs"
_MAX_ERROR_CHARS = 8_000
_MAX_IDEMPOTENCY_KEY_CHARS = 512
#: Longest delay a job may be enqueued with (30 days).
_MAX_DELAY_SECONDS = 30 * 24 * 3600
_MAX_LIST = 1_000
#: Dead jobs one purge script removes; ``purge_dead`` repeats it until none is left.
_PURGE_BATCH = 1_000
_STATUSES: tuple[str, ...] = get_args(JobStatus)

# Shared head of every script. KEYS[1] = P:seq (routes the script to the queue's slot),
# ARGV[1] = P ('{prefix:jobs}').
_COMMON = """
local P = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function job_key(id) return P .. ':job:' .. id end
-- Remove a done or dead job with its index entries (never a queued or running one).
local function forget(id)
  local f = redis.call('HMGET', job_key(id), 'owner', 'idem', 'status')
  if f[1] then
    redis.call('ZREM', f[1] .. ':all', id)
    redis.call('ZREM', f[1] .. ':' .. f[3], id)
    if redis.call('HGET', f[1] .. ':idem', f[2]) == id then
      redis.call('HDEL', f[1] .. ':idem', f[2])
    end
  end
  redis.call('ZREM', P .. ':dead', id)
  redis.call('DEL', job_key(id))
  redis.call('ZREM', P .. ':expiring', id)
end
-- Done jobs whose retention has passed: at most 100 per call.
local function sweep(now)
  local due = redis.call('ZRANGEBYSCORE', P .. ':expiring', '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(due) do forget(id) end
end
local function move(id, from, to)
  local f = redis.call('HMGET', job_key(id), 'owner', 'seq')
  redis.call('ZREM', f[1] .. ':' .. from, id)
  redis.call('ZADD', f[1] .. ':' .. to, f[2], id)
  redis.call('HSET', job_key(id), 'status', to)
  if from == 'dead' then redis.call('ZREM', P .. ':dead', id) end
  if to == 'dead' then redis.call('ZADD', P .. ':dead', f[2], id) end
end
local function requeue(id, available)
  local kind = redis.call('HGET', job_key(id), 'kind')
  redis.call('HSET', job_key(id), 'available', available)
  redis.call('ZADD', P .. ':queued:' .. kind, available, id)
end
local function release(id, now)
  redis.call('ZREM', P .. ':running', id)
  redis.call('HDEL', job_key(id), 'worker', 'lease')
  redis.call('HSET', job_key(id), 'updated', now)
end
"""

# ARGV[2] = owner key, [3] = idempotency key, [4] = kind, [5] = scope JSON,
# [6] = payload JSON, [7] = max_attempts, [8] = delay (ms), [9] = request id ('' = none).
# Returns {created (0/1), job hash}.
_ENQUEUE = (
    _COMMON
    + """
local owner, idem, kind = ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
sweep(now)
local existing = redis.call('HGET', owner .. ':idem', idem)
if existing and redis.call('EXISTS', job_key(existing)) == 1 then
  local expires = redis.call('HGET', job_key(existing), 'expires')
  if expires and tonumber(expires) <= now then
    forget(existing)
  else
    return {0, redis.call('HGETALL', job_key(existing))}
  end
end
local seq = redis.call('INCR', P .. ':seq')
local id = string.format('j%015d', seq)
local available = now + tonumber(ARGV[8])
redis.call('HSET', job_key(id), 'id', id, 'kind', kind, 'scope', ARGV[5], 'payload', ARGV[6],
  'idem', idem, 'status', 'queued', 'attempts', 0, 'max_attempts', ARGV[7],
  'created', now, 'updated', now, 'available', available, 'owner', owner, 'seq', seq)
if ARGV[9] ~= '' then redis.call('HSET', job_key(id), 'request_id', ARGV[9]) end
redis.call('HSET', owner .. ':idem', idem, id)
redis.call('ZADD', owner .. ':all', seq, id)
redis.call('ZADD', owner .. ':queued', seq, id)
redis.call('ZADD', P .. ':queued:' .. kind, available, id)
redis.call('SADD', P .. ':kinds', kind)
return {1, redis.call('HGETALL', job_key(id))}
"""
)

# ARGV[2] = worker, [3] = lease in ms, [4..] = kinds (none = every kind).
# Returns the claimed job hash, or an empty array.
_CLAIM = (
    _COMMON
    + """
local now = now_ms()
sweep(now)
local expired = redis.call('ZRANGEBYSCORE', P .. ':running', '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(expired) do
  local f = redis.call('HMGET', job_key(id), 'status', 'worker', 'attempts', 'max_attempts')
  release(id, now)
  if f[1] == 'running' then
    redis.call('HSET', job_key(id), 'last_error',
      'lease of worker ' .. (f[2] or '?') .. ' expired before the job finished')
    if tonumber(f[3]) >= tonumber(f[4]) then
      move(id, 'running', 'dead')
    else
      move(id, 'running', 'queued')
      requeue(id, now)
    end
  end
end
local kinds = {}
if #ARGV >= 4 then
  for i = 4, #ARGV do kinds[#kinds + 1] = ARGV[i] end
else
  kinds = redis.call('SMEMBERS', P .. ':kinds')
end
while true do
  local best_id, best_score, best_kind = nil, nil, nil
  for _, kind in ipairs(kinds) do
    local head = redis.call('ZRANGEBYSCORE', P .. ':queued:' .. kind, '-inf', now,
      'WITHSCORES', 'LIMIT', 0, 1)
    if #head > 0 then
      local score = tonumber(head[2])
      if best_id == nil or score < best_score or (score == best_score and head[1] < best_id) then
        best_id, best_score, best_kind = head[1], score, kind
      end
    end
  end
  if best_id == nil then return {} end
  redis.call('ZREM', P .. ':queued:' .. best_kind, best_id)
  if redis.call('HGET', job_key(best_id), 'status') == 'queued' then
    local lease = now + tonumber(ARGV[3])
    redis.call('HINCRBY', job_key(best_id), 'attempts', 1)
    redis.call('HSET', job_key(best_id), 'worker', ARGV[2], 'lease', lease, 'updated', now)
    redis.call('ZADD', P .. ':running', lease, best_id)
    move(best_id, 'queued', 'running')
    return redis.call('HGETALL', job_key(best_id))
  end
  -- a stale entry (job gone or not queued): dropped, look again
end
"""
)

# Checks shared by complete and fail: ARGV[2] = id, [3] = worker.
# {-1} = no such job, {-2, status, holder} = the worker does not hold the lease.
_HOLDER_CHECK = """
local id, worker = ARGV[2], ARGV[3]
if redis.call('EXISTS', job_key(id)) == 0 then return {-1} end
local held = redis.call('HMGET', job_key(id), 'status', 'worker')
if held[1] ~= 'running' or held[2] ~= worker then
  return {-2, held[1] or '', held[2] or ''}
end
local now = now_ms()
"""

# ARGV[4] = retention of a done job in ms ('' = kept).
_COMPLETE = (
    _COMMON
    + _HOLDER_CHECK
    + """
sweep(now)
release(id, now)
move(id, 'running', 'done')
if ARGV[4] ~= '' then
  local expires = now + tonumber(ARGV[4])
  redis.call('HSET', job_key(id), 'expires', expires)
  redis.call('ZADD', P .. ':expiring', expires, id)
end
return {1, redis.call('HGETALL', job_key(id))}
"""
)

# ARGV[4] = error text, [5] = jitter fraction in [0, 1], [6] = base ms, [7] = max ms.
_FAIL = (
    _COMMON
    + _HOLDER_CHECK
    + """
local f = redis.call('HMGET', job_key(id), 'attempts', 'max_attempts')
local attempts, max_attempts = tonumber(f[1]), tonumber(f[2])
release(id, now)
redis.call('HSET', job_key(id), 'last_error', ARGV[4])
if attempts >= max_attempts then
  move(id, 'running', 'dead')
else
  local ceiling = math.min(tonumber(ARGV[7]), tonumber(ARGV[6]) * 2 ^ (attempts - 1))
  move(id, 'running', 'queued')
  requeue(id, now + math.floor(tonumber(ARGV[5]) * ceiling))
end
return {1, redis.call('HGETALL', job_key(id))}
"""
)

# ARGV[2] = id, [3] = owner key. {-1} = not the owner's, {-2, status} = not dead.
_REPLAY = (
    _COMMON
    + """
local id = ARGV[2]
local f = redis.call('HMGET', job_key(id), 'owner', 'status')
if f[1] ~= ARGV[3] then return {-1} end
if f[2] ~= 'dead' then return {-2, f[2]} end
local now = now_ms()
redis.call('HSET', job_key(id), 'attempts', 0, 'updated', now)
move(id, 'dead', 'queued')
requeue(id, now)
return {1, redis.call('HGETALL', job_key(id))}
"""
)


# ARGV[2] = owner key, [3] = job id ('' = every dead job of the owner, up to ARGV[4]).
# One job: {-1} = not the owner's, {-2, status} = not dead, {1} = purged.
# Every job: {n} = how many were purged.
_PURGE = (
    _COMMON
    + """
local owner, id = ARGV[2], ARGV[3]
if id ~= '' then
  local f = redis.call('HMGET', job_key(id), 'owner', 'status')
  if f[1] ~= owner then return {-1} end
  if f[2] ~= 'dead' then return {-2, f[2]} end
  forget(id)
  return {1}
end
local dead = redis.call('ZRANGE', owner .. ':dead', 0, tonumber(ARGV[4]) - 1)
for _, job in ipairs(dead) do forget(job) end
return {#dead}
"""
)

# ARGV[2] = owner key, [3] = a time (ms), [4] = most jobs examined per status. Deletes the
# owner's done and dead jobs last updated before that time; {n} = how many.
_PURGE_OLD = (
    _COMMON
    + """
local owner, before, most = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local removed = 0
for _, status in ipairs({'done', 'dead'}) do
  for _, id in ipairs(redis.call('ZRANGE', owner .. ':' .. status, 0, most - 1)) do
    local updated = tonumber(redis.call('HGET', job_key(id), 'updated') or '0')
    if updated < before then
      forget(id)
      removed = removed + 1
    end
  end
end
return {removed}
"""
)

# ARGV[2] = owner key, [3] = session id ('' = every session), [4] = offset in the owner's
# ``all`` index, [5] = how many ids to look at. Deletes the jobs (any status) among them
# that belong to the session; returns {deleted, looked at}.
_FORGET = (
    _COMMON
    + """
local owner, session = ARGV[2], ARGV[3]
local start = tonumber(ARGV[4])
local ids = redis.call('ZRANGE', owner .. ':all', start, start + tonumber(ARGV[5]) - 1)
local deleted = 0
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', job_key(id), 'scope', 'kind')
  local mine = session == ''
  if f[1] and not mine then mine = cjson.decode(f[1])['session_id'] == session end
  if not f[1] then
    redis.call('ZREM', owner .. ':all', id)
    deleted = deleted + 1
  elseif mine then
    redis.call('ZREM', P .. ':queued:' .. f[2], id)
    redis.call('ZREM', P .. ':running', id)
    forget(id)
    deleted = deleted + 1
  end
end
return {deleted, #ids}
"""
)

# Counts for stats(): {queued (every kind), running, dead}.
_STATS = (
    _COMMON
    + """
local queued = 0
for _, kind in ipairs(redis.call('SMEMBERS', P .. ':kinds')) do
  queued = queued + redis.call('ZCARD', P .. ':queued:' .. kind)
end
return {queued, redis.call('ZCARD', P .. ':running'), redis.call('ZCARD', P .. ':dead')}
"""
)

# Adds the dead jobs of one user (KEYS[2] = the user's dead set) to P:dead, once per
# deployment (KEYS[3] = P:dead_indexed is set by the caller after the last user).
_INDEX_DEAD = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
return redis.call('ZUNIONSTORE', ARGV[1] .. ':dead', 2, ARGV[1] .. ':dead', KEYS[2])
"""

# Moves one key of the untagged layout (KEYS = old, new); ARGV[1] = old base
# ('{prefix}:jobs'), [2] = new base, [3] = retention of done jobs in ms ('' = kept).
# A job hash gets its owner key rewritten, and a done one its expiry.
_MIGRATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('RENAMENX', KEYS[1], KEYS[2]) == 0 then return 0 end
if string.sub(KEYS[2], 1, #ARGV[2] + 5) == ARGV[2] .. ':job:' then
  local f = redis.call('HMGET', KEYS[2], 'owner', 'status', 'updated', 'id')
  if f[1] and string.sub(f[1], 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
    redis.call('HSET', KEYS[2], 'owner', ARGV[2] .. string.sub(f[1], #ARGV[1] + 1))
  end
  if f[2] == 'done' and ARGV[3] ~= '' then
    local expires = tonumber(f[3]) + tonumber(ARGV[3])
    redis.call('HSET', KEYS[2], 'expires', expires)
    redis.call('ZADD', ARGV[2] .. ':expiring', expires, f[4])
  end
end
return 1
"""


def backoff_ceiling_seconds(attempts: int, base: float, maximum: float) -> float:
    """The longest delay after the ``attempts``-th failed attempt: ``min(max, base *
    2**(attempts-1))``; the actual delay is uniform in ``[0, ceiling]`` (full jitter)."""
    return float(min(maximum, base * 2 ** max(attempts - 1, 0)))


class RedisJobQueue(Lifecycle):
    """:class:`~memmachine.ports.JobQueue` on Redis.

    ``url`` is ``redis://``, ``rediss://``, ``unix:///path.sock`` (the embedded FalkorDB
    server) or ``redis+cluster://`` / ``rediss+cluster://`` (a Redis Cluster); ``password``
    overrides one in the URL. ``key_prefix`` starts every key so that deployments can share
    a server. A failed job waits a random delay up to
    ``min(backoff_max_seconds, backoff_base_seconds * 2**(attempts-1))`` before its next try.
    A done job is removed ``done_retention_seconds`` after it finished (``None``: kept).
    """

    name = _STORE
    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "mm",
        password: str | None = None,
        backoff_base_seconds: float = 1.0,
        backoff_max_seconds: float = 300.0,
        done_retention_seconds: float | None = None,
    ) -> None:
        check_redis_url(url, "job queue")
        if not re.fullmatch(ID_PATTERN, key_prefix):
            raise ConfigurationError(f"job queue key prefix {key_prefix!r} must match {ID_PATTERN}")
        if backoff_base_seconds < 0 or backoff_max_seconds < 0:
            raise ConfigurationError("job queue backoff seconds must be >= 0")
        if done_retention_seconds is not None and done_retention_seconds <= 0:
            raise ConfigurationError("job queue done_retention_seconds must be > 0 or None")
        self._url = url
        self._legacy_base = f"{key_prefix}:jobs"
        self._base = f"{{{key_prefix}:jobs}}"
        self._retention_ms = (
            "" if done_retention_seconds is None else str(round(done_retention_seconds * 1000))
        )
        self._password = password
        self._backoff_base_ms = backoff_base_seconds * 1000
        self._backoff_max_ms = backoff_max_seconds * 1000
        self._random = random.Random()  # jitter only; not security sensitive
        self._client: RedisClient | None = None
        self._scripts: dict[str, AsyncScript] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, check the server answers and move keys of the untagged layout of
        earlier versions to their tagged names (single server only). Idempotent."""
        if self._client is not None:
            return
        migration = KeyMigration(
            f"{self._legacy_base}:*",
            self._tagged_name,
            script=_MIGRATE,
            args=(self._legacy_base, self._base, self._retention_ms),
        )
        client = await connect_redis(
            self._url,
            password=self._password,
            label="job queue",
            store=_STORE,
            migration=migration,
        )
        self._client = client
        self._scripts = {
            name: client.register_script(source)
            for name, source in (
                ("enqueue", _ENQUEUE),
                ("claim", _CLAIM),
                ("complete", _COMPLETE),
                ("fail", _FAIL),
                ("replay", _REPLAY),
                ("purge", _PURGE),
                ("purge_old", _PURGE_OLD),
                ("stats", _STATS),
                ("forget", _FORGET),
                ("index_dead", _INDEX_DEAD),
            )
        }
        try:
            await self._index_dead_jobs()
        except BaseException:
            await self.close()
            raise

    async def _index_dead_jobs(self) -> None:
        """Fill ``P:dead`` with the dead jobs of a queue written by a version that did not
        keep it: every user's dead set is merged in (one script per user), then
        ``P:dead_indexed`` is set. Done once per queue; later starts only check the flag."""
        client = self._require_client()
        flag = f"{self._base}:dead_indexed"
        with _translate("index dead jobs"):
            if await client.exists(flag):
                return
            pattern = f"{self._base}:u:*:dead"
            async for key in client.scan_iter(match=pattern, count=500):
                await self._script("index_dead")(
                    keys=[f"{self._base}:seq", key, flag], args=[self._base]
                )
            await client.set(flag, "1")

    async def close(self) -> None:
        """Close the client and its pool. Safe to call twice."""
        client, self._client = self._client, None
        self._scripts = {}
        if client is not None:
            await client.aclose()

    def compactor(self) -> RedisCompactor:
        """What rewrites the server's files after a forget (see :class:`RedisCompactor`)."""
        return RedisCompactor(self._url, name="jobs", password=self._password)

    async def health(self) -> StoreHealth:
        """PING and ``INFO server``: Redis version and round-trip latency. Never raises."""
        return await redis_health(self, self._client, detail=f"prefix {self._base}")

    # ------------------------------------------------------------------ producer side

    async def enqueue(
        self,
        scope: Scope,
        kind: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str,
        max_attempts: int = 5,
        delay_seconds: float = 0.0,
        request_id: str | None = None,
    ) -> Job:
        """Store a queued job, claimable after ``delay_seconds``, with the id of the request
        that enqueued it; a key already enqueued by this user returns that job as is."""
        if not re.fullmatch(ID_PATTERN, kind):
            raise InvalidInputError(f"job kind {kind!r} must match {ID_PATTERN}", field="kind")
        if not idempotency_key or len(idempotency_key) > _MAX_IDEMPOTENCY_KEY_CHARS:
            raise InvalidInputError(
                f"idempotency_key must be 1-{_MAX_IDEMPOTENCY_KEY_CHARS} characters",
                field="idempotency_key",
            )
        if max_attempts < 1:
            raise InvalidInputError(
                f"max_attempts must be >= 1, got {max_attempts}", field="max_attempts"
            )
        if not 0 <= delay_seconds <= _MAX_DELAY_SECONDS:
            raise InvalidInputError(
                f"delay_seconds must be within 0-{_MAX_DELAY_SECONDS}, got {delay_seconds}",
                field="delay_seconds",
            )
        if request_id is not None and not re.fullmatch(REQUEST_ID_PATTERN, request_id):
            raise InvalidInputError(
                f"request_id must match {REQUEST_ID_PATTERN}", field="request_id"
            )
        try:
            payload_json = json.dumps(payload, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"job payload is not JSON: {exc}", field="payload") from exc
        args = [
            self._base,
            self._owner(scope),
            idempotency_key,
            kind,
            scope.model_dump_json(),
            payload_json,
            str(max_attempts),
            str(round(delay_seconds * 1000)),
            request_id or "",
        ]
        with _translate("enqueue a job", write=True):
            reply = await self._run("enqueue", args)
        return _job(reply[1])

    # ------------------------------------------------------------------ worker side

    async def claim(
        self, worker: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 60.0
    ) -> Job | None:
        """The oldest available queued job of ``kinds`` (all when ``None``), now running
        for ``worker`` until ``lease_seconds`` pass; expired leases are reclaimed first."""
        if not worker:
            raise InvalidInputError("worker must not be empty", field="worker")
        if lease_seconds <= 0:
            raise InvalidInputError(
                f"lease_seconds must be > 0, got {lease_seconds}", field="lease_seconds"
            )
        if kinds is not None and not kinds:
            return None
        args = [self._base, worker, str(max(1, round(lease_seconds * 1000))), *(kinds or ())]
        with _translate("claim a job", write=True):
            reply = await self._run("claim", args)
        return _job(reply) if reply else None

    async def complete(self, job_id: str, worker: str) -> Job:
        """Mark the job ``done``; :class:`ConflictError` unless ``worker`` holds its lease."""
        with _translate("complete a job", write=True):
            reply = await self._run("complete", [self._base, job_id, worker, self._retention_ms])
        return _checked(reply, job_id, worker)

    async def fail(self, job_id: str, worker: str, error: str) -> Job:
        """Record ``error``; requeue with backoff, or ``dead`` after the last attempt.
        :class:`ConflictError` unless ``worker`` holds the lease."""
        args = [
            self._base,
            job_id,
            worker,
            error[:_MAX_ERROR_CHARS],
            repr(self._random.random()),
            repr(self._backoff_base_ms),
            repr(self._backoff_max_ms),
        ]
        with _translate("fail a job", write=True):
            reply = await self._run("fail", args)
        return _checked(reply, job_id, worker)

    # ------------------------------------------------------------------ inspection

    async def get(self, scope: Scope, job_id: str) -> Job | None:
        """The job when it belongs to the scope's user, else ``None``."""
        client = self._require_client()
        with _translate("read a job"):
            fields = cast(dict[str, str], await client.hgetall(self._job_key(job_id)))
        if not fields or fields.get("owner") != self._owner(scope) or _expired(fields):
            return None
        return _job_of(fields)

    async def list_jobs(
        self, scope: Scope, *, status: JobStatus | None = None, limit: int = 100
    ) -> list[Job]:
        """The user's jobs, newest first, of ``status`` when given."""
        if status is not None and status not in _STATUSES:
            raise InvalidInputError(f"unknown job status {status!r}", field="status")
        if not 1 <= limit <= _MAX_LIST:
            raise InvalidInputError(f"limit must be 1-{_MAX_LIST}, got {limit}", field="limit")
        client = self._require_client()
        index = f"{self._owner(scope)}:{status or 'all'}"
        with _translate("list jobs"):
            ids = cast(list[str], await client.zrevrange(index, 0, limit - 1))
            async with client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hgetall(self._job_key(job_id))
                rows: list[dict[str, str]] = await pipe.execute()
        return [
            job
            for job in (_job_of(row) for row in rows if row and not _expired(row))
            if status is None or job.status == status
        ]

    async def count_jobs(self, scope: Scope) -> dict[JobStatus, int]:
        """How many jobs the user has in each status (one ``ZCARD`` per status index)."""
        client = self._require_client()
        owner = self._owner(scope)
        with _translate("count jobs"):
            async with client.pipeline(transaction=False) as pipe:
                for status in _STATUSES:
                    pipe.zcard(f"{owner}:{status}")
                counts: list[int] = await pipe.execute()
        return {
            cast(JobStatus, status): int(count)
            for status, count in zip(_STATUSES, counts, strict=True)
        }

    async def replay(self, scope: Scope, job_id: str) -> Job:
        """Requeue the user's dead job with attempts reset (``last_error`` is kept).
        :class:`NotFoundError` outside its scope, :class:`ConflictError` when not dead."""
        with _translate("replay a job", write=True):
            reply = await self._run("replay", [self._base, job_id, self._owner(scope)])
        code = int(reply[0])
        if code == -1:
            raise NotFoundError(f"job {job_id!r} not found")
        if code == -2:
            raise ConflictError(f"job {job_id!r} is {reply[1]}, only dead jobs can be replayed")
        return _job(reply[1])

    async def purge_dead(self, scope: Scope, job_id: str | None = None) -> int:
        """Delete the user's dead job ``job_id``, or every dead job of the user; how many
        were deleted. :class:`NotFoundError` when ``job_id`` is not the user's,
        :class:`ConflictError` when it is not dead."""
        owner = self._owner(scope)
        if job_id is not None:
            with _translate("purge a dead job", write=True):
                reply = await self._run("purge", [self._base, owner, job_id, "1"])
            code = int(reply[0])
            if code == -1:
                raise NotFoundError(f"job {job_id!r} not found")
            if code == -2:
                raise ConflictError(f"job {job_id!r} is {reply[1]}, only dead jobs can be purged")
            return 1
        purged = 0
        while True:
            with _translate("purge dead jobs", write=True):
                reply = await self._run("purge", [self._base, owner, "", str(_PURGE_BATCH)])
            purged += int(reply[0])
            if int(reply[0]) < _PURGE_BATCH:
                return purged

    async def purge_finished(self, scope: Scope, before: datetime) -> int:
        """Delete the user's done and dead jobs (payloads with them) last updated before
        ``before``; how many. Each call of the script examines at most
        :data:`_PURGE_BATCH` jobs per status."""
        owner = self._owner(scope)
        cutoff = str(int(before.timestamp() * 1000))
        with _translate("purge finished jobs", write=True):
            reply = await self._run("purge_old", [self._base, owner, cutoff, str(_PURGE_BATCH)])
        return int(reply[0])

    async def forget(self, scope: Scope) -> int:
        """Delete every job of the scope's user (of its session when it names one), in
        any status, a page of ids per script; how many were deleted."""
        owner, session = self._owner(scope), scope.session_id or ""
        deleted = start = 0
        while True:
            with _translate("forget jobs", write=True):
                removed, seen = await self._run(
                    "forget", [self._base, owner, session, str(start), str(_PURGE_BATCH)]
                )
            deleted += int(removed)
            if int(seen) < _PURGE_BATCH:
                return deleted
            start += int(seen) - int(removed)

    async def stats(self) -> JobQueueStats:
        """Queued, running and dead jobs over every user (counters only)."""
        with _translate("count jobs"):
            queued, running, dead = await self._run("stats", [self._base])
        return JobQueueStats(queued=int(queued), running=int(running), dead=int(dead))

    # ------------------------------------------------------------------ plumbing

    def _tagged_name(self, key: str) -> str | None:
        """The current name of a key of the untagged layout, or ``None`` for a key that is
        not one of the queue's (``seq``, ``kinds``, ``running``, ``job:<id>``,
        ``queued:<kind>``, ``u:<tenant>:<org>:<project>:<user>:<index>``)."""
        head = f"{self._legacy_base}:"
        if not key.startswith(head):
            return None
        parts = key[len(head) :].split(":")
        shaped = (
            (len(parts) == 1 and parts[0] in ("seq", "kinds", "running"))
            or (len(parts) == 2 and parts[0] in ("job", "queued"))
            or (len(parts) == 6 and parts[0] == "u" and parts[5] in ("idem", "all", *_STATUSES))
        )
        return f"{self._base}:{':'.join(parts)}" if shaped else None

    async def _run(self, name: str, args: Sequence[str]) -> Any:
        """Run script ``name`` with ``P:seq`` as its one declared key (the slot to use)."""
        return await self._script(name)(keys=[f"{self._base}:seq"], args=list(args))

    def _owner(self, scope: Scope) -> str:
        return f"{self._base}:u:{scope.tenant}:{scope.org_id}:{scope.project_id}:{scope.user_id}"

    def _job_key(self, job_id: str) -> str:
        return f"{self._base}:job:{job_id}"

    def _require_client(self) -> RedisClient:
        if self._client is None:
            raise StoreError("job queue is not started", store=_STORE)
        return self._client

    def _script(self, name: str) -> AsyncScript:
        self._require_client()
        return self._scripts[name]


# ---------------------------------------------------------------------- helpers


def _checked(reply: list[Any], job_id: str, worker: str) -> Job:
    """The job from a complete/fail reply, or the error its code means."""
    code = int(reply[0])
    if code == -1:
        raise NotFoundError(f"job {job_id!r} not found")
    if code == -2:
        status, holder = reply[1], reply[2]
        held = f"held by worker {holder!r}" if holder else "not held by any worker"
        raise ConflictError(
            f"worker {worker!r} does not hold the lease of job {job_id!r} ({status}, {held})"
        )
    return _job(reply[1])


def _job(flat: list[str]) -> Job:
    """A job from a script's ``HGETALL`` reply (a flat field/value list)."""
    return _job_of(dict(zip(flat[::2], flat[1::2], strict=True)))


def _job_of(fields: dict[str, str]) -> Job:
    try:
        return Job(
            id=fields["id"],
            kind=fields["kind"],
            scope=Scope.model_validate_json(fields["scope"]),
            payload=json.loads(fields["payload"]),
            idempotency_key=fields["idem"],
            status=fields["status"],  # type: ignore[arg-type]  # validated by pydantic
            attempts=int(fields["attempts"]),
            max_attempts=int(fields["max_attempts"]),
            last_error=fields.get("last_error"),
            created_at=_time(fields["created"]),
            updated_at=_time(fields["updated"]),
            available_at=_time(fields["available"]),
            request_id=fields.get("request_id"),
        )
    except (KeyError, ValueError) as exc:
        raise StoreError(
            f"job {fields.get('id', '?')!r} is unreadable: {describe_error(exc)}", store=_STORE
        ) from exc


def _time(ms: str) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, UTC)


def _expired(fields: dict[str, str]) -> bool:
    """A done job past its retention (removed by the next sweep; never shown meanwhile)."""
    expires = fields.get("expires")
    return expires is not None and int(expires) <= time.time() * 1000


@contextmanager
def _translate(action: str, *, write: bool = False) -> Iterator[None]:
    """Turn redis-py exceptions into the error tree (see
    :func:`~memmachine.adapters.redis.redis_common.translate_errors`); let ours through."""
    with translate_errors(f"job queue could not {action}", store=_STORE, write=write):
        yield
