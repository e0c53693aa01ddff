"""A scripted OpenAI-compatible embedding endpoint (``POST /v1/embeddings``) on loopback.

Its vectors are deterministic per text (:func:`raw_vector`) and deliberately unnormalised;
failures are scripted per request (see :class:`FakeOpenAI`).
"""

from __future__ import annotations

import json
import random
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

__all__ = ["DIMS", "FakeOpenAI", "raw_vector", "unit"]

DIMS = 8


def raw_vector(text: str, dims: int = DIMS) -> list[float]:
    """The server's deterministic, deliberately unnormalised vector for ``text``."""
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    return (rng.normal(size=dims) * 5.0).tolist()


def unit(vector: list[float]) -> np.ndarray[Any, Any]:
    array = np.asarray(vector)
    return array / np.linalg.norm(array)


class FakeOpenAI:
    """``POST /v1/embeddings`` with scripted failures.

    ``failures`` is a list of statuses answered (in order) before succeeding (``None`` in
    it: that request is answered); ``always`` answers every request with that status. Error
    bodies echo the Authorization header, as careless servers do, so tests can check the key
    never reaches an error message.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failures: list[int | None] = []
        self.always: int | None = None
        self.retry_after: str | None = None
        self.drop_one = False
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    status = server.failures.pop(0) if server.failures else server.always
                if self.path != "/v1/embeddings":
                    self._json(404, {"error": {"message": "no such route"}})
                elif status is not None:
                    auth = self.headers.get("Authorization", "")
                    self._json(status, {"error": {"message": f"failure; you sent {auth!r}"}})
                else:
                    self._json(200, server.answer(body))

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status != 200 and server.retry_after is not None:
                    self.send_header("Retry-After", server.retry_after)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        dims = body.get("dimensions", DIMS)
        data = [
            {"object": "embedding", "index": i, "embedding": raw_vector(text, dims)}
            for i, text in enumerate(body["input"])
        ]
        random.Random(len(self.requests)).shuffle(data)
        if self.drop_one:
            data.pop()
        return {"object": "list", "data": data, "model": body["model"]}

    def start(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def inputs(self) -> list[list[str]]:
        return [r["body"]["input"] for r in self.requests]
