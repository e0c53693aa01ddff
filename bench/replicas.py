"""REST load across replicas: one and two ``memmachine serve`` processes on the same
production stores, compared in one run.

Starts the production stores as ``bench/load.py --production`` does (a FalkorDB server, a
throwaway PostgreSQL database, Redis under a unique prefix; all on loopback, all removed
afterwards), then runs the phases of ``--phases`` (default ``1,2,1``: one replica, two, one
again, so a drift in the machine's load shows): each phase runs ``--clients`` clients of
``bench/load.py`` (adds and searches) for ``--duration`` seconds or ``--max-ops`` requests,
client ``i`` talking to replica ``i % n`` as a load balancer spreading connections would.
Every phase has users of its own, so each starts with cold search indexes.

Beside the clients, one probe per phase measures what a client moving between replicas
sees: it adds a unique message through one replica and at once searches for it through the
other (the same replica in a one-replica phase), retrying every 5 ms until it is found;
then deletes it through the first and searches through the second for it again. Reported:
how many first searches found the write, the time from the acknowledgement to the first
search that found it, and how many deleted episodes a search returned (must be 0).

After each phase every user's episodes are listed and compared with what was acknowledged
(``bench/load.py``'s check). The machine's load average, each replica's CPU time and RSS
are recorded per phase.

    uv run python bench/replicas.py                                  # 8 clients, 40 s per phase
    uv run python bench/replicas.py --phases 1,2 --duration 20 --json /tmp/replicas.json

Progress goes to stderr, the result tables to stdout, raw numbers to ``--json``. Exit status
1 when a request failed, a write was lost or a deleted episode came back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

__all__ = ["build_parser", "main", "run"]

_TICKS = os.sysconf("SC_CLK_TCK")


def load_module() -> ModuleType:
    """The sibling ``bench/load.py`` (its clients, check and server control)."""
    name = "memmachine_bench_load"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("load.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from bench/load.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (Linux ``/proc``), 0 when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


@dataclass
class Probes:
    """What the read-after-write probe saw in one phase."""

    found_first: int = 0
    found_later: int = 0
    never_found: int = 0
    lag_ms: list[float] = field(default_factory=list)
    resurfaced: int = 0
    errors: list[str] = field(default_factory=list)


async def probe_loop(
    bases: Sequence[str], user: str, stop_at: float, probes: Probes, pause: float
) -> None:
    """Write through one replica, search through the other until found; delete through
    the first, search through the second for it again. Alternates the direction."""
    clients = [httpx.AsyncClient(base_url=base, timeout=30) for base in bases]
    number = 0
    try:
        while time.monotonic() < stop_at:
            writer = clients[number % len(clients)]
            reader = clients[(number + 1) % len(clients)]
            number += 1
            token = uuid.uuid4().hex[:12]
            body = {
                "user_id": user,
                "session_id": "probe",
                "messages": [{"role": "user", "content": f"probe marker {token} was written"}],
            }
            try:
                added = await writer.post("/v1/memories", json=body)
                added.raise_for_status()
                episode = added.json()["episode_ids"][0]
                acknowledged = time.perf_counter()
                attempts = 0
                while True:
                    attempts += 1
                    found = await reader.post(
                        "/v1/memories/search",
                        json={"user_id": user, "query": token, "top_k": 5, "types": ["episodic"]},
                    )
                    found.raise_for_status()
                    if episode in {hit["id"] for hit in found.json()["episodic"]}:
                        probes.lag_ms.append((time.perf_counter() - acknowledged) * 1000)
                        if attempts == 1:
                            probes.found_first += 1
                        else:
                            probes.found_later += 1
                        break
                    if time.perf_counter() - acknowledged > 5.0:
                        probes.never_found += 1
                        break
                    await asyncio.sleep(0.005)
                deleted = await writer.delete(f"/v1/memories/{episode}", params={"user_id": user})
                deleted.raise_for_status()
                again = await reader.post(
                    "/v1/memories/search",
                    json={"user_id": user, "query": token, "top_k": 5, "types": ["episodic"]},
                )
                again.raise_for_status()
                if episode in {hit["id"] for hit in again.json()["episodic"]}:
                    probes.resurfaced += 1
            except httpx.HTTPError as exc:
                probes.errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(pause)
    finally:
        for client in clients:
            await client.aclose()


async def run_phase(
    args: argparse.Namespace,
    number: int,
    servers: Sequence[Any],
    bases: Sequence[str],
) -> dict[str, Any]:
    """One phase: the clients and the probe against ``bases``, then the check."""
    load = load_module()
    scale = load.load_scale()
    outcome = load.Outcome()
    queries = scale.make_queries(200, args.seed)
    cpu_before = [cpu_seconds(server.pid) for server in servers]
    load_start = os.getloadavg()
    started = time.perf_counter()
    stop_at = time.monotonic() + args.duration
    probes = Probes()

    async def client(index: int) -> None:
        base = bases[index % len(bases)]
        await load.client_loop(
            index, base, args, outcome, stop_at, queries, user_prefix=f"phase{number}-user"
        )

    await asyncio.gather(
        *(client(index) for index in range(args.clients)),
        probe_loop(bases, f"probe-{number}", stop_at, probes, args.probe_pause),
    )
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()
    cpu = [
        cpu_seconds(server.pid) - before for server, before in zip(servers, cpu_before, strict=True)
    ]
    check = await load.verify(bases[0], outcome)
    errors = sum(len(errors) for errors in outcome.errors.values())
    done = sum(len(latencies) for latencies in outcome.latencies.values()) + errors
    return {
        "phase": number,
        "replicas": len(bases),
        "seconds": elapsed,
        "requests": done,
        "throughput_per_s": done / elapsed,
        "errors": errors,
        "first_errors": [e for errors in outcome.errors.values() for e in errors][:5],
        "operations": {
            kind: {
                "count": len(outcome.latencies[kind]) + len(outcome.errors[kind]),
                "errors": len(outcome.errors[kind]),
                "latency_ms": scale.percentiles(outcome.latencies[kind]),
            }
            for kind in ("add", "search")
        },
        "verify": check,
        "probes": {
            "found_first": probes.found_first,
            "found_later": probes.found_later,
            "never_found": probes.never_found,
            "lag_ms": scale.percentiles(probes.lag_ms),
            "lag_ms_max": max(probes.lag_ms, default=float("nan")),
            "resurfaced": probes.resurfaced,
            "errors": probes.errors[:5],
            "error_count": len(probes.errors),
        },
        "load_average_start": load_start,
        "load_average_end": load_end,
        "replica_cpu_seconds": cpu,
        "replica_rss": [scale.rss_bytes(server.pid) for server in servers],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the stores and replicas, run every phase, stop everything; raw results."""
    load = load_module()
    results: dict[str, Any] = {
        "command": " ".join(["python", "bench/replicas.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_start": os.getloadavg(),
        "phases": [],
    }
    args.production = True
    with tempfile.TemporaryDirectory(prefix="mm-replicas-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        stores, graph_pid = stack.enter_context(load.production_stores(args, workdir))
        results["stores"] = "FalkorDB server, PostgreSQL, Redis (loopback)"
        ports = [load._free_port() for _ in range(max(args.phases))]
        processes: dict[int, Any] = {}

        async def replica(index: int) -> Any:
            if index not in processes:
                data_dir = workdir / f"replica{index}"
                log = workdir / f"r{index}.log"
                process = stack.enter_context(
                    load.serve(data_dir, args.model, ports[index], log, stores)
                )
                await load.wait_healthy(
                    f"http://127.0.0.1:{ports[index]}", process, args.startup_timeout
                )
                processes[index] = process
            return processes[index]

        for number, count in enumerate(args.phases, start=1):
            servers = [await replica(index) for index in range(count)]
            bases = [f"http://127.0.0.1:{ports[index]}" for index in range(count)]
            sys.stderr.write(
                f"phase {number}: {count} replica(s), {args.clients} clients, "
                f"≤{args.duration:.0f} s\n"
            )
            args.seed += 1  # other users and messages in every phase
            phase = await run_phase(args, number, servers, bases)
            sys.stderr.write(
                f"  {phase['requests']} requests, {phase['throughput_per_s']:.1f}/s, "
                f"{phase['errors']} errors\n"
            )
            results["phases"].append(phase)
        results["graph_rss"] = load.load_scale().rss_bytes(graph_pid)
        stack.close()  # stop the replicas and the stores, then read what they logged
        logs = [(workdir / f"r{index}.log").read_text(errors="replace") for index in processes]
    results["server_log_tracebacks"] = sum(log.count("Traceback") for log in logs)
    results["load_average_end"] = os.getloadavg()
    return results


def render(results: dict[str, Any]) -> str:
    lines = [
        f"Stores: {results['stores']}. {results['date']}, {results['machine']}, load average "
        f"at start {results['load_average_start'][0]:.1f}. Command: `{results['command']}`",
        "",
        "| phase | replicas | requests | per s | errors | add p50 / p95 ms | "
        "search p50 / p95 ms | acked episodes | lost | load avg (1 min) start → end | "
        "replica CPU s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for phase in results["phases"]:
        add, search = phase["operations"]["add"], phase["operations"]["search"]
        check = phase["verify"]
        lost = check["missing"] + check["changed"]
        lines.append(
            f"| {phase['phase']} | {phase['replicas']} | {phase['requests']:,} | "
            f"{phase['throughput_per_s']:.1f} | {phase['errors']} | "
            f"{add['latency_ms']['p50']:.0f} / {add['latency_ms']['p95']:.0f} | "
            f"{search['latency_ms']['p50']:.0f} / {search['latency_ms']['p95']:.0f} | "
            f"{check['acknowledged']:,} | {lost} | "
            f"{phase['load_average_start'][0]:.1f} → {phase['load_average_end'][0]:.1f} | "
            f"{' + '.join(f'{cpu:.0f}' for cpu in phase['replica_cpu_seconds'])} |"
        )
    lines += [
        "",
        "Read-after-write probe (add through one replica, search through the other at once, "
        "the same one in a one-replica phase; delete, search again):",
        "",
        "| phase | replicas | probes | found by the first search | found later | never | "
        "ack → found p50 / max ms | deleted episodes returned | probe errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for phase in results["phases"]:
        probe = phase["probes"]
        total = probe["found_first"] + probe["found_later"] + probe["never_found"]
        lines.append(
            f"| {phase['phase']} | {phase['replicas']} | {total} | {probe['found_first']} | "
            f"{probe['found_later']} | {probe['never_found']} | "
            f"{probe['lag_ms']['p50']:.0f} / {probe['lag_ms_max']:.0f} | "
            f"{probe['resurfaced']} | {probe['error_count']} |"
        )
    lines += ["", f"Tracebacks in the replicas' logs: {results['server_log_tracebacks']}."]
    return "\n".join(lines)


def _phases(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(count not in (1, 2, 3, 4) for count in counts):
        raise argparse.ArgumentTypeError(f"--phases takes replica counts 1-4, got {text!r}")
    return counts


def build_parser() -> argparse.ArgumentParser:
    load = load_module()
    parser = argparse.ArgumentParser(description="memmachine REST load across replicas")
    parser.add_argument("--phases", type=_phases, default=[1, 2, 1], help="replicas per phase")
    parser.add_argument("--probe-pause", type=float, default=0.2, help="seconds between probes")
    load.add_client_arguments(parser, duration=40.0, max_ops=4_000, per=" per phase")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    load_module().check_client_arguments(parser, args)
    results = asyncio.run(run(args))
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    bad = results["server_log_tracebacks"]
    for phase in results["phases"]:
        check = phase["verify"]
        bad += phase["errors"] + check["missing"] + check["unexpected"] + check["changed"]
        bad += phase["probes"]["resurfaced"] + phase["probes"]["never_found"]
        bad += phase["probes"]["error_count"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
