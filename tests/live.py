"""A real ``memmachine serve`` process on a free loopback port, for tests that talk to the
server the way a user's program does (the SDKs, a generated client, an installed wheel)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_environment(**settings: str) -> dict[str, str]:
    """This process's environment without any ``MEMMACHINE_*`` setting or provider key,
    plus ``settings``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MEMMACHINE_") and key != "OPENAI_API_KEY"
    }
    env.update(settings)
    return env


@contextmanager
def serve(
    workdir: Path,
    env: Mapping[str, str],
    *,
    command: Sequence[str] = (sys.executable, "-m", "memmachine_server.cli"),
    timeout: float = 90,
) -> Iterator[LiveServer]:
    """Run ``command serve --port <free>`` with ``env`` (log in ``workdir/server.log``) until
    ``/health`` answers 200; kill it on exit."""
    port = free_port()
    log = workdir / "server.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*command, "serve", "--port", str(port)],
            env=dict(env),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"server exited early:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
