"""Servers for the SDK to talk to: the real app on a loopback port (``server_url``) and a
scripted loopback HTTP server for failures the real app does not produce on demand."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memmachine_server.background import serve_in_background
from tests.server.conftest import make_settings

#: The real app served by uvicorn on a free loopback port, in a thread; yields its base URL.
live_server = serve_in_background


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with live_server(make_settings(tmp_path_factory.mktemp("sdk"), api_keys="sdk-key=t1")) as url:
        yield url


@dataclass
class Reply:
    """One scripted answer: a status, headers and JSON body; ``hang`` holds the
    response back until the test ends (so the client's timeout fires first)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass
class Seen:
    method: str
    path: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class ScriptedServer:
    """A real HTTP server on a loopback port that answers from a script, one reply per
    request in order (the last reply repeats), and records every request it got. It stands
    in for a server (or a proxy in front of one) failing in ways the real app cannot be
    made to fail on demand: 502/503/504, 429 with Retry-After, hanging."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.seen: list[Seen] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def answer(self, *replies: Reply) -> None:
        with self._lock:
            self.script = list(replies)
            self.seen = []

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                reply = server._next(
                    Seen(
                        self.command,
                        self.path.split("?")[0],
                        json.loads(raw) if raw else None,
                        {name.lower(): value for name, value in self.headers.items()},
                    )
                )
                if reply.hang:
                    server.release.wait(30)
                payload = json.dumps(reply.body).encode() if reply.body is not None else b""
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (timeout) and closed the socket
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    server.start()
    yield server
    server.stop()
