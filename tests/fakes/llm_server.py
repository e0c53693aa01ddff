"""A scripted OpenAI-compatible chat server on loopback, for every test that needs an LLM.

It is a real HTTP server (stdlib, in a thread) on ``127.0.0.1`` with a random port that
answers ``POST /v1/chat/completions`` (and ``/chat/completions``) from a script, records every
request, and can fail on demand. Nothing leaves the machine.

Usage, with the pytest fixture::

    from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
    from tests.fakes.llm_server import Reply, ScriptedChatServer

    async def test_something(llm_server: ScriptedChatServer) -> None:
        llm_server.reply('{"text": "hi", "covered_ids": []}')    # answered next, once
        llm_server.reply(Reply(status=429), "second answer")    # a 429, then a text
        llm_server.reply(lambda request: request.last_user_content.upper())
        model = OpenAILanguageModel(llm_server.base_url, "test-model", api_key="sk-test")
        ...
        assert llm_server.requests[0].messages[0]["role"] == "system"

or without pytest: ``with ScriptedChatServer() as server: ...``.

Script
    Each request takes the next item queued by :meth:`ScriptedChatServer.reply`. An item is
    a ``str`` (the assistant's text), a :class:`Reply` (status, delay, headers, finish
    reason, ``content=None``, ``tool_calls``), or a function of the :class:`ChatRequest`
    returning either.
    When the queue is empty, ``default`` answers (set it in the constructor or assign it,
    e.g. ``server.default = Reply(status=500)`` for "fails forever"); with no default the
    server answers HTTP 418 "script exhausted", which the client does not retry, so an
    unexpected extra call fails the test loudly.

Failures
    ``Reply(status=429)`` / ``Reply(status=500)`` answer an OpenAI-style error body; the
    message defaults to one that echoes the request's ``Authorization`` header, as careless
    servers do, so tests can check an API key never reaches an error. ``Reply(delay=...)``
    sleeps before answering (for timeouts). Error replies carry ``retry-after-ms: 1`` unless
    ``headers`` say otherwise, so the ``openai`` client's own retries do not slow tests down.

Options
    ``reject_response_format=True`` answers HTTP 400 to any request carrying
    ``response_format`` (as some servers do) without consuming a script item.
    ``api_key="..."`` answers 401 to requests without ``Authorization: Bearer <api_key>``.

Vision and transcription
    A user message whose ``content`` is a list of parts (text and ``image_url``) is a vision
    request: :attr:`ChatRequest.last_user_content` joins its text parts and
    :attr:`ChatRequest.images` lists its image URLs. ``POST /v1/audio/transcriptions``
    (multipart) takes the next script item as the transcript and answers ``{"text": ...}``;
    :attr:`ChatRequest.upload` holds the uploaded file's bytes and ``body`` the form fields.

Recording
    ``server.requests`` lists every :class:`ChatRequest` (path, headers, JSON body), including
    rejected ones, in arrival order; ``server.completions`` only those answered with 200.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["ChatRequest", "Reply", "ScriptItem", "ScriptedChatServer"]

CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
TRANSCRIPTION_PATHS = frozenset({"/v1/audio/transcriptions", "/audio/transcriptions"})


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: The uploaded file of a multipart (transcription) request.
    upload: bytes | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages", [])
        return messages if isinstance(messages, list) else []

    @property
    def model(self) -> str | None:
        return self.body.get("model")

    @property
    def response_format(self) -> Any:
        return self.body.get("response_format")

    @property
    def system_content(self) -> str:
        """The text of every system message, joined."""
        return "\n".join(str(m.get("content", "")) for m in self.messages if m["role"] == "system")

    @property
    def last_user_content(self) -> str:
        users = [m for m in self.messages if m.get("role") == "user"]
        if not users:
            return ""
        content = users[-1].get("content", "")
        if isinstance(content, list):
            return "\n".join(
                str(part.get("text", "")) for part in content if part.get("type") == "text"
            )
        return str(content)

    @property
    def images(self) -> list[str]:
        """The image URLs (``data:`` URLs included) of every user message's content parts."""
        return [
            str(part.get("image_url", {}).get("url", ""))
            for message in self.messages
            if message.get("role") == "user" and isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == "image_url"
        ]

    @property
    def authorization(self) -> str:
        return next((v for k, v in self.headers.items() if k.lower() == "authorization"), "")


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer: ``content`` with HTTP 200, or an error ``status``."""

    content: str | None = ""
    status: int = 200
    #: The error message for a non-200 status; by default it echoes the Authorization header.
    error: str | None = None
    #: Seconds to wait before answering.
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"
    #: Function calls the assistant makes, ``(name, arguments as a JSON string)``; with
    #: them the finish reason is ``tool_calls`` and each call gets an id ``call_<n>``.
    tool_calls: tuple[tuple[str, str], ...] = ()


ScriptItem = str | Reply | Callable[[ChatRequest], "str | Reply"]


class ScriptedChatServer:
    """See the module docstring. Start with ``start()`` or ``with``; stop with ``stop()``."""

    def __init__(
        self,
        *,
        default: ScriptItem | None = None,
        reject_response_format: bool = False,
        api_key: str | None = None,
    ) -> None:
        self.default = default
        self.reject_response_format = reject_response_format
        self.api_key = api_key
        self.requests: list[ChatRequest] = []
        self.completions: list[ChatRequest] = []
        self._script: deque[ScriptItem] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The API root to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script ----------------------------------------------------------------------------

    def reply(self, *items: ScriptItem) -> None:
        """Queue answers for the next requests, in order, one request each."""
        with self._lock:
            self._script.extend(items)

    @property
    def pending(self) -> int:
        """How many queued answers are left."""
        with self._lock:
            return len(self._script)

    def _next(self, request: ChatRequest) -> Reply:
        with self._lock:
            item = self._script.popleft() if self._script else self.default
        if item is None:
            return Reply(status=418, error="scripted chat server: script exhausted")
        if callable(item) and not isinstance(item, Reply):
            item = item(request)
        return Reply(content=item) if isinstance(item, str) else item

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.05,), daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- HTTP ------------------------------------------------------------------------------

    def _answer(self, request: ChatRequest) -> tuple[int, dict[str, str], dict[str, Any]]:
        if request.path in TRANSCRIPTION_PATHS:
            reply = self._next(request)
            if reply.status != 200:
                return reply.status, {"retry-after-ms": "1"}, _error("scripted failure", "x")
            with self._lock:
                self.completions.append(request)
            return 200, {}, {"text": reply.content or ""}
        if request.path not in CHAT_PATHS:
            return 404, {}, _error(f"no route {request.path}", "not_found")
        if self.api_key is not None and request.authorization != f"Bearer {self.api_key}":
            return 401, {}, _error(f"bad key: {request.authorization!r}", "invalid_api_key")
        if self.reject_response_format and "response_format" in request.body:
            return (
                400,
                {},
                _error(
                    "Unrecognized request argument supplied: response_format",
                    "invalid_request_error",
                    param="response_format",
                ),
            )
        reply = self._next(request)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            message = reply.error or f"scripted failure; you sent {request.authorization!r}"
            headers = reply.headers or {"retry-after-ms": "1"}
            return reply.status, headers, _error(message, "server_error")
        with self._lock:
            self.completions.append(request)
        return 200, reply.headers, _completion(request, reply)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                kind = self.headers.get("Content-Type", "")
                if kind.startswith("multipart/form-data"):
                    fields, upload = _multipart(kind, raw)
                    request = ChatRequest(
                        path=self.path.split("?")[0],
                        headers=dict(self.headers.items()),
                        body=fields,
                        upload=upload,
                    )
                    with server._lock:
                        server.requests.append(request)
                    self._send(*server._answer(request))
                    return
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    self._send(400, {}, _error("body is not JSON", "invalid_request_error"))
                    return
                request = ChatRequest(
                    path=self.path.split("?")[0],
                    headers=dict(self.headers.items()),
                    body=body if isinstance(body, dict) else {},
                )
                with server._lock:
                    server.requests.append(request)
                self._send(*server._answer(request))

            def _send(self, status: int, headers: dict[str, str], payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


def _multipart(kind: str, raw: bytes) -> tuple[dict[str, Any], bytes | None]:
    """The text fields and the file of a multipart/form-data body."""
    message = BytesParser(policy=default).parsebytes(f"Content-Type: {kind}\r\n\r\n".encode() + raw)
    fields: dict[str, Any] = {}
    upload: bytes | None = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            upload = payload
        elif isinstance(name, str):
            fields[name] = payload.decode("utf-8", errors="replace")
    return fields, upload


def _error(message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def _completion(request: ChatRequest, reply: Reply) -> dict[str, Any]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request.messages)
    completion_tokens = len((reply.content or "").split())
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{len(request.messages)}_{index}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for index, (name, arguments) in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-scripted-{len(request.messages)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model or "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else reply.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
