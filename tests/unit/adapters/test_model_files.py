"""resolve_model_dir against a real loopback HTTP server that imitates the model hub."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from memmachine.adapters.model_files import (
    OPTIONAL_FILES,
    default_cache_dir,
    resolve_model_dir,
)
from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.errors import ConfigurationError

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
QINT8 = "onnx/model_qint8.onnx"
PREFIX = f"/{MODEL}/resolve/main/"


class FakeHub:
    """Serves ``files`` (hub path -> bytes or a file) under ``/{owner}/{name}/resolve/main/``.

    Records every requested path. ``truncate`` holds paths whose body is cut short after a
    promised ``Content-Length``; ``delay`` holds up every answer.
    """

    def __init__(self, files: dict[str, bytes | Path]) -> None:
        self.files = files
        self.requests: list[str] = []
        self.truncate: set[str] = set()
        self.delay = 0.0
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with hub.lock:
                    hub.requests.append(self.path)
                if hub.delay:
                    time.sleep(hub.delay)
                rel = self.path[len(PREFIX) :] if self.path.startswith(PREFIX) else None
                content = hub.files.get(rel) if rel is not None else None
                if content is None:
                    self.send_error(404, "Entry not found")
                    return
                body = content.read_bytes() if isinstance(content, Path) else content
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if rel in hub.truncate:
                    self.wfile.write(body[: len(body) // 3])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


FAKE_FILES: dict[str, bytes] = {
    "tokenizer.json": b'{"fake": "tokenizer"}',
    "config.json": b'{"hidden_size": 4}',
    "onnx/model.onnx": b"fake onnx bytes" * 1000,
}


@pytest.fixture(autouse=True)
def _online(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    with FakeHub(dict(FAKE_FILES)) as hub:
        yield hub


def _resolve(
    hub: FakeHub, cache: Path, onnx_file: str = "onnx/model.onnx", timeout: float = 5.0
) -> Path:
    return resolve_model_dir(
        MODEL, onnx_file=onnx_file, cache_dir=cache, hub_url=hub.url, timeout=timeout
    )


def _leftovers(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.name.endswith(".part")]


def _model_files(model_dir: Path) -> dict[str, bytes | Path]:
    """The shared model's files by hub path, without the fp32 ONNX file (not needed here)."""
    return {
        p.relative_to(model_dir).as_posix(): p
        for p in model_dir.rglob("*")
        if p.is_file() and p.name != "model.onnx"
    }


async def test_download_load_and_reuse(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = _model_files(model_dir)
    cache = tmp_path / "cache"
    with FakeHub(files) as hub, caplog.at_level(logging.INFO):
        path = _resolve(hub, cache, QINT8)
        assert path == cache / "sentence-transformers--all-MiniLM-L6-v2"
        for rel in ("tokenizer.json", "config.json", QINT8, *OPTIONAL_FILES):
            assert (path / rel).read_bytes() == (model_dir / rel).read_bytes(), rel
        assert _leftovers(cache) == []
        first = len(hub.requests)
        assert first == 3 + len(OPTIONAL_FILES)
        assert sum("downloaded model file" in r.getMessage() for r in caplog.records) == first

        embedder = OnnxEmbedder(path, onnx_file=QINT8, model_name=MODEL)
        vectors = await embedder.embed(["I love green tea", "The car is red"])
        assert embedder.dimensions == 384
        assert len(vectors) == 2

        assert _resolve(hub, cache, QINT8) == path
        assert len(hub.requests) == first  # cached: no request at all


def test_missing_optional_files_are_tolerated(fake_hub: FakeHub, tmp_path: Path) -> None:
    path = _resolve(fake_hub, tmp_path)
    assert (path / "onnx/model.onnx").read_bytes() == FAKE_FILES["onnx/model.onnx"]
    assert not (path / "tokenizer_config.json").exists()
    assert len(fake_hub.requests) == 3 + len(OPTIONAL_FILES)
    _resolve(fake_hub, tmp_path)
    assert len(fake_hub.requests) == 3 + len(OPTIONAL_FILES)


def test_404_on_a_required_file(fake_hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        _resolve(fake_hub, tmp_path, "onnx/model_fp16.onnx")
    message = info.value.message
    assert "onnx/model_fp16.onnx" in message
    assert "404" in message
    assert "MEMMACHINE_EMBEDDING_MODEL" in message
    target = tmp_path / "sentence-transformers--all-MiniLM-L6-v2"
    assert not (target / "onnx/model_fp16.onnx").exists()
    assert _leftovers(tmp_path) == []


def test_a_broken_download_never_leaves_a_complete_looking_file(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    fake_hub.truncate.add("onnx/model.onnx")
    target = tmp_path / "sentence-transformers--all-MiniLM-L6-v2" / "onnx/model.onnx"
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_MODEL"):
        _resolve(fake_hub, tmp_path)
    assert not target.exists()
    assert _leftovers(tmp_path) == []
    # Once the hub behaves, the next resolve completes the download.
    fake_hub.truncate.clear()
    assert _resolve(fake_hub, tmp_path) == target.parent.parent
    assert target.read_bytes() == FAKE_FILES["onnx/model.onnx"]


def test_offline_makes_no_request(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigurationError, match="HF_HUB_OFFLINE") as info:
        _resolve(fake_hub, tmp_path)
    assert "MEMMACHINE_EMBEDDING_MODEL" in info.value.message
    assert fake_hub.requests == []
    # A cached model is still usable offline.
    target = tmp_path / "sentence-transformers--all-MiniLM-L6-v2"
    for rel, body in FAKE_FILES.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(body)
    assert _resolve(fake_hub, tmp_path) == target
    assert fake_hub.requests == []


def test_local_directory_passes_through(model_dir: Path, fake_hub: FakeHub, tmp_path: Path) -> None:
    for onnx_file in ("onnx/model.onnx", QINT8):
        got = resolve_model_dir(
            str(model_dir),
            onnx_file=onnx_file,
            cache_dir=tmp_path,
            hub_url=fake_hub.url,
            timeout=1.0,
        )
        assert got == model_dir
    assert fake_hub.requests == []
    assert list(tmp_path.iterdir()) == []


def test_local_directory_without_the_files(fake_hub: FakeHub, tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ConfigurationError, match=r"lacks onnx/model\.onnx"):
        resolve_model_dir(
            str(tmp_path),
            onnx_file="onnx/model.onnx",
            cache_dir=tmp_path / "cache",
            hub_url=fake_hub.url,
            timeout=1.0,
        )
    assert fake_hub.requests == []


@pytest.mark.parametrize(
    ("model", "onnx_file"),
    [
        ("/definitely/not/here", "onnx/model.onnx"),
        ("just-a-name", "onnx/model.onnx"),
        ("a/b/c", "onnx/model.onnx"),
        ("../etc", "onnx/model.onnx"),
        (MODEL, "../../outside.onnx"),
        (MODEL, "/abs/model.onnx"),
    ],
)
def test_unusable_names_make_no_request(
    fake_hub: FakeHub, tmp_path: Path, model: str, onnx_file: str
) -> None:
    with pytest.raises(ConfigurationError):
        resolve_model_dir(
            model, onnx_file=onnx_file, cache_dir=tmp_path, hub_url=fake_hub.url, timeout=1.0
        )
    assert fake_hub.requests == []


def test_unreachable_hub(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigurationError, match="unreachable") as info:
        resolve_model_dir(
            MODEL,
            onnx_file="onnx/model.onnx",
            cache_dir=tmp_path,
            hub_url=f"http://127.0.0.1:{port}",
            timeout=2.0,
        )
    assert "MEMMACHINE_EMBEDDING_MODEL" in info.value.message


def test_slow_hub_times_out(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.delay = 1.0
    with pytest.raises(ConfigurationError, match="timed out"):
        _resolve(fake_hub, tmp_path, timeout=0.2)
    assert _leftovers(tmp_path) == []


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "memmachine" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "memmachine" / "models"
