"""LongMemEval retrieval: how often memmachine's search finds the evidence, by session and
by turn, on LongMemEval's published JSON, with the ingestion rate and search latency.

Data: LongMemEval (Wu et al., ICLR 2025, https://github.com/xiaowu0162/LongMemEval). Its files
``longmemeval_oracle.json`` (only the evidence sessions), ``longmemeval_s.json`` (about 50
sessions per question) and ``longmemeval_m.json`` (about 500) are one JSON list of questions,
each with ``question_id``, ``question_type``, ``question``, ``answer``, ``question_date``,
``haystack_session_ids``, ``haystack_dates``, ``haystack_sessions`` (each a list of turns
``{"role", "content"}``, an evidence turn marked ``"has_answer": true``) and
``answer_session_ids``. A question id ending in ``_abs`` asks about something never said
(abstention): it has no evidence and is counted apart, as LongMemEval's own retrieval
evaluation leaves it out.

Every question has its own history, so each is a user of its own (its question id): every
haystack session becomes a memmachine session, every turn one message (role and producer
= the turn's role), timestamped at the session's date plus the turn's position in seconds,
ingested through the real ``MemoryManager.add_messages`` (embedded stores by default,
``--production`` for a graph server + PostgreSQL + Redis started by the bench). The question
is then searched in that user's scope (``search_episodes``, ``--top-k`` hits, the query
embedded by the real model) and scored:

* turn recall any@k / all@k: some / every evidence turn among the first k hits;
* session recall any@k / all@k: some / every answer session among the first k distinct
  sessions of the hits.

The same run scores a BM25 baseline over each history's turns (Okapi, k1 = 1.2, b = 0.75,
the bare turn text). ``question_date`` is read and kept with each result; memmachine's
search anchors relative time ("last week") at the newest candidate it finds.

    uv run python bench/longmemeval.py --data /path/to/longmemeval_s.json [--limit 50]
    uv run python bench/longmemeval.py --data ... --production --graph neo4j --json out.json

The data is not shipped (and not on the benchmark machine): download it from the LongMemEval
repository (MIT licence) and pass its path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "bench" / "longmemeval_s.json"
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"
KS = (1, 5, 10)
#: Messages per ``add_messages`` call.
BATCH = 64
_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"


@dataclass(frozen=True)
class Turn:
    session: str
    index: int
    role: str
    content: str
    timestamp: datetime
    evidence: bool


@dataclass(frozen=True)
class Question:
    """One LongMemEval instance, read from its JSON."""

    id: str
    type: str
    question: str
    answer: str
    date: str
    sessions: dict[str, list[Turn]]
    answer_sessions: frozenset[str]

    @property
    def abstention(self) -> bool:
        return self.id.endswith("_abs")

    @property
    def evidence_turns(self) -> frozenset[tuple[str, int]]:
        return frozenset(
            (turn.session, turn.index)
            for turns in self.sessions.values()
            for turn in turns
            if turn.evidence
        )


def parse_date(text: str) -> datetime:
    """``"2023/05/20 (Sat) 02:21"`` as UTC (the dataset's dates carry no zone)."""
    return datetime.strptime(text.strip(), _DATE_FORMAT).replace(tzinfo=UTC)


def load(path: Path, limit: int | None = None, types: Sequence[str] = ()) -> list[Question]:
    """The questions of a LongMemEval file (the first ``limit``, of ``types`` when given)."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a JSON list of questions")
    questions: list[Question] = []
    for item in raw:
        if types and item["question_type"] not in types:
            continue
        ids, dates, haystack = (
            item["haystack_session_ids"],
            item["haystack_dates"],
            item["haystack_sessions"],
        )
        if not len(ids) == len(dates) == len(haystack):
            raise ValueError(f"{item['question_id']}: haystack ids, dates and sessions differ")
        sessions: dict[str, list[Turn]] = {}
        for session_id, date, turns in zip(ids, dates, haystack, strict=True):
            start = parse_date(date)
            sessions[str(session_id)] = [
                Turn(
                    session=str(session_id),
                    index=index,
                    role=str(turn["role"]),
                    content=str(turn["content"]),
                    timestamp=start + timedelta(seconds=index),
                    evidence=bool(turn.get("has_answer", False)),
                )
                for index, turn in enumerate(turns)
            ]
        questions.append(
            Question(
                id=str(item["question_id"]),
                type=str(item["question_type"]),
                question=str(item["question"]),
                answer=str(item["answer"]),
                date=str(item.get("question_date", "")),
                sessions=sessions,
                answer_sessions=frozenset(str(s) for s in item.get("answer_session_ids", [])),
            )
        )
        if limit is not None and len(questions) >= limit:
            break
    return questions


# ---------------------------------------------------------------------- scoring


@dataclass
class Recall:
    """Session and turn recall (any / all at each k), per question type, and latency."""

    ks: tuple[int, ...] = KS
    hits: dict[tuple[str, str, str, int], int] = field(default_factory=lambda: defaultdict(int))
    counts: Counter[str] = field(default_factory=Counter)
    abstentions: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, question: Question, ranked: Sequence[tuple[str, int]], latency_ms: float) -> None:
        """Score one question's ranking of ``(session id, turn index)``, best first."""
        self.latencies_ms.append(latency_ms)
        if question.abstention:
            self.abstentions += 1
            return
        self.counts[question.type] += 1
        turns = question.evidence_turns
        sessions = list(dict.fromkeys(session for session, _ in ranked))
        for k in self.ks:
            found_turns = turns & set(ranked[:k])
            found_sessions = question.answer_sessions & set(sessions[:k])
            for level, found, wanted in (
                ("turn", found_turns, turns),
                ("session", found_sessions, question.answer_sessions),
            ):
                if not wanted:
                    continue
                self.hits[(question.type, level, "any", k)] += bool(found)
                self.hits[(question.type, level, "all", k)] += found == wanted

    def at(self, level: str, kind: str, k: int, question_type: str | None = None) -> float:
        types = [question_type] if question_type else list(self.counts)
        total = sum(self.counts[t] for t in types)
        if total == 0:
            return math.nan
        return sum(self.hits[(t, level, kind, k)] for t in types) / total

    def latency(self, share: float) -> float:
        if not self.latencies_ms:
            return math.nan
        return scale.percentiles(self.latencies_ms)["p50" if share == 0.5 else "p95"]

    def as_json(self) -> dict[str, Any]:
        block: dict[str, Any] = {}
        for question_type in [None, *sorted(self.counts)]:
            name = question_type or "overall"
            block[name] = {
                f"{level}_{kind}@{k}": self.at(level, kind, k, question_type)
                for level in ("session", "turn")
                for kind in ("any", "all")
                for k in self.ks
            }
            block[name]["questions"] = (
                self.counts[question_type] if question_type else sum(self.counts.values())
            )
        return {
            "recall": block,
            "abstentions": self.abstentions,
            "latency_ms": scale.percentiles(self.latencies_ms),
        }


class Bm25:
    """Okapi BM25 over one history's turns (the baseline)."""

    def __init__(self, documents: Sequence[str]) -> None:
        from memmachine.indexing.terms import document_terms

        self.terms = [Counter(document_terms(text)) for text in documents]
        self.lengths = [sum(terms.values()) for terms in self.terms]
        self.average = statistics.fmean(self.lengths) if self.lengths else 0.0
        self.df: Counter[str] = Counter()
        for terms in self.terms:
            self.df.update(terms.keys())

    def rank(self, query: str) -> list[int]:
        from memmachine.indexing.terms import query_terms

        words = query_terms(query)
        n = len(self.terms)
        scores = []
        for position, terms in enumerate(self.terms):
            score = 0.0
            for word in words:
                tf = terms.get(word, 0)
                if tf:
                    idf = math.log(1 + (n - self.df[word] + 0.5) / (self.df[word] + 0.5))
                    norm = 1.2 * (0.25 + 0.75 * self.lengths[position] / (self.average or 1))
                    score += idf * tf * 2.2 / (tf + norm)
            scores.append((-score, position))
        return [position for score, position in sorted(scores) if score < 0]


# ---------------------------------------------------------------------- the run


async def run(
    args: argparse.Namespace,
    questions: list[Question],
    stores: dict[str, Any] | None = None,
    server_pid: int | None = None,
) -> dict[str, Any]:
    """Ingest every question's history, search every question; the raw results. CPU is
    this process's and the graph server's (``server_pid``, else the embedded child's)."""
    from memmachine.bootstrap import open_manager
    from memmachine.config import EmbeddingSettings, Settings
    from memmachine.models import NewMessage, Scope

    embedding = EmbeddingSettings(
        provider="local", model=str(args.model), quantize=args.quantize, query_cache_size=0
    )
    memmachine, baseline = Recall(), Recall()
    ingested = 0
    ingest_wall = ingest_cpu = 0.0
    with tempfile.TemporaryDirectory(prefix="mm-lme-") as tmp:
        settings = Settings(data_dir=Path(tmp), embedding=embedding, **(stores or {}))
        async with open_manager(settings) as manager:
            if server_pid is None and not stores:
                server_pid = scale.graph_pid(scale.Stores(label="embedded", data_dir=Path(tmp)))
            clock = scale.CpuClock(server_pid)
            for number, question in enumerate(questions, 1):
                user = Scope(user_id=_user_id(question.id))
                began, cpu = time.perf_counter(), clock.now()
                for session_id, turns in question.sessions.items():
                    scope = user.for_session(_session_id(session_id))
                    for start in range(0, len(turns), BATCH):
                        batch = turns[start : start + BATCH]
                        messages = [
                            NewMessage(
                                role="assistant" if turn.role == "assistant" else "user",
                                producer=turn.role,
                                content=turn.content,
                                timestamp=turn.timestamp,
                                metadata={"lme_session": turn.session, "lme_turn": turn.index},
                            )
                            for turn in batch
                            if turn.content.strip()
                        ]
                        if messages:
                            await manager.add_messages(scope, messages, working=False)
                            ingested += len(messages)
                ingest_wall += time.perf_counter() - began
                ingest_cpu += clock.now() - cpu

                began = time.perf_counter()
                hits = await manager.search_episodes(user, question.question, top_k=args.top_k)
                elapsed = (time.perf_counter() - began) * 1000
                ranked = [
                    (
                        str(hit.episode.metadata["lme_session"]),
                        int(hit.episode.metadata["lme_turn"]),
                    )
                    for hit in hits
                ]
                memmachine.add(question, ranked, elapsed)

                everything = [turn for turns in question.sessions.values() for turn in turns]
                began = time.perf_counter()
                order = Bm25([turn.content for turn in everything]).rank(question.question)
                elapsed = (time.perf_counter() - began) * 1000
                ranked = [(everything[i].session, everything[i].index) for i in order]
                baseline.add(question, ranked[: args.top_k], elapsed)
                if args.forget:
                    await manager.forget_user(user)
                sys.stderr.write(f"\r{number}/{len(questions)} questions, {ingested:,} turns")
            sys.stderr.write("\n")
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "uv run python bench/longmemeval.py " + " ".join(sys.argv[1:]),
        "load_average": os.getloadavg(),
        "data": str(args.data),
        "questions": len(questions),
        "types": dict(Counter(question.type for question in questions)),
        "ingest": {
            "turns": ingested,
            "wall_s": ingest_wall,
            "cpu_s": ingest_cpu,
            "turns_per_s": ingested / ingest_wall if ingest_wall else math.nan,
        },
        "memmachine": memmachine.as_json(),
        "bm25": baseline.as_json(),
    }


def _user_id(question_id: str) -> str:
    """A user id for a question id (ids allow letters, digits and ``._@+-=#~|``)."""
    return "lme-" + "".join(c if c.isalnum() or c in "._-" else "-" for c in question_id)[:120]


def _session_id(session_id: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in session_id)[:128]


def render(results: dict[str, Any]) -> str:
    """Markdown tables of one run."""
    ingest = results["ingest"]
    lines = [
        f"{results['questions']} questions ({results['memmachine']['abstentions']} abstention, "
        f"not scored) from {results['data']}, {results['date']}, load average "
        f"{results['load_average'][0]:.1f}. Command: `{results['command']}`",
        "",
        f"Ingestion: {ingest['turns']:,} turns in {ingest['wall_s']:.1f} s "
        f"({ingest['turns_per_s']:.1f} turns/s), {ingest['cpu_s']:.1f} CPU s (bench process).",
        "",
        "| method | session any@1 | session any@5 | session all@5 | session any@10 | "
        "session all@10 | turn any@1 | turn any@5 | turn any@10 | turn all@10 | "
        "search p50 / p95 ms |",
        "| --- |" + " ---: |" * 9 + " --- |",
    ]
    for name in ("memmachine", "bm25"):
        recall = results[name]["recall"]["overall"]
        latency = results[name]["latency_ms"]
        cells = [
            recall[key]
            for key in (
                "session_any@1",
                "session_any@5",
                "session_all@5",
                "session_any@10",
                "session_all@10",
                "turn_any@1",
                "turn_any@5",
                "turn_any@10",
                "turn_all@10",
            )
        ]
        lines.append(
            f"| {name} | "
            + " | ".join(f"{cell:.3f}" for cell in cells)
            + f" | {latency['p50']:.1f} / {latency['p95']:.1f} |"
        )
    lines += [
        "",
        "memmachine by question type:",
        "",
        "| question type | questions | session any@5 | session any@10 | session all@10 | "
        "turn any@5 | turn any@10 | turn all@10 |",
        "| --- | ---: |" + " ---: |" * 6,
    ]
    for name, recall in results["memmachine"]["recall"].items():
        lines.append(
            f"| {name} | {recall['questions']} | "
            + " | ".join(
                f"{recall[key]:.3f}"
                for key in (
                    "session_any@5",
                    "session_any@10",
                    "session_all@10",
                    "turn_any@5",
                    "turn_any@10",
                    "turn_all@10",
                )
            )
            + " |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="a LongMemEval JSON file (oracle, S or M)"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--types", default="", help="only these question types (comma-separated)")
    parser.add_argument("--top-k", type=int, default=50, help="hits asked of each search")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="ONNX model directory")
    parser.add_argument("--quantize", choices=("none", "int8"), default="none")
    parser.add_argument(
        "--forget",
        action="store_true",
        help="forget each question's user once scored (bounded stores for the M variant)",
    )
    scale.add_production_arguments(parser)
    parser.add_argument("--graph", default="falkordb", help="with --production: falkordb or neo4j")
    parser.add_argument("--json", type=Path, help="also write every number here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(
            f"--data: {args.data} not found (download longmemeval_oracle/s/m.json from "
            "https://github.com/xiaowu0162/LongMemEval)"
        )
    if args.top_k < max(KS):
        parser.error(f"--top-k must be at least {max(KS)}")
    if args.graph not in scale.GRAPHS:
        parser.error(f"--graph takes {' or '.join(scale.GRAPHS)}")
    types = [part.strip() for part in args.types.split(",") if part.strip()]
    questions = load(args.data, args.limit, types)
    if args.production:
        results = on_production_stores(args, questions)
    else:
        results = asyncio.run(run(args, questions))
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


def on_production_stores(args: argparse.Namespace, questions: list[Question]) -> dict[str, Any]:
    """The run on a graph server + PostgreSQL + Redis that the bench starts and removes."""
    from pydantic import SecretStr

    with (
        scale.service_servers(args),
        tempfile.TemporaryDirectory(prefix="mm-lme-graph-") as tmp,
        scale.graph_server(args.graph, Path(tmp)) as server,
        scale.postgres_database(args.postgres_admin_url, f"mm_lme_{os.urandom(4).hex()}") as pg,
    ):
        prefix = f"mm-lme-{os.urandom(4).hex()}"
        stores: dict[str, Any] = {
            "episode_store_url": SecretStr(server.url),
            "profile_store_url": SecretStr(pg),
            "working_store_url": SecretStr(args.machine_redis_url),
            "working_key_prefix": prefix,
        }
        if server.password is not None:
            stores["episode_store_user"] = server.user
            stores["episode_store_password"] = SecretStr(server.password)
        try:
            return asyncio.run(run(args, questions, stores, server.pid))
        finally:
            scale.delete_redis_keys(args.machine_redis_url, prefix)


if __name__ == "__main__":
    raise SystemExit(main())
