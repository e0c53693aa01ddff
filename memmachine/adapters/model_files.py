"""Where the local embedder's model files come from: a directory, or a one-time hub download.

:func:`resolve_model_dir` turns the ``MEMMACHINE_EMBEDDING_MODEL`` setting into a directory
holding the ONNX file and ``tokenizer.json``:

* an existing directory is used as is (and must contain both files);
* otherwise the value must be a hub model name ``owner/name``; its files are downloaded once
  into ``<cache_dir>/<owner>--<name>/`` and reused from there without any request.

Every file is streamed to a temporary file next to its destination, flushed to disk and then
renamed into place, so a file that exists under its final name is always complete: a crash or
a broken connection mid-download leaves at most a ``.part`` file, which is never read.
``HF_HUB_OFFLINE=1`` forbids every request. Every failure is a
:class:`~memmachine.errors.ConfigurationError` whose message tells the user what to set.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from pathlib import Path, PurePosixPath

import httpx

from memmachine.errors import ConfigurationError

__all__ = ["OPTIONAL_FILES", "default_cache_dir", "hub_offline", "resolve_model_dir"]

logger = logging.getLogger(__name__)

#: Files fetched when present on the hub; a 404 on any of them is fine.
OPTIONAL_FILES: tuple[str, ...] = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_OFFLINE_VALUES = frozenset({"1", "true", "yes", "on"})
_CHUNK = 1 << 20
_HINT = (
    "set MEMMACHINE_EMBEDDING_MODEL to a local directory containing {onnx_file} and "
    "tokenizer.json, or MEMMACHINE_EMBEDDING_PROVIDER=none for lexical-only search"
)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memmachine/models``, or ``~/.cache/memmachine/models``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "memmachine" / "models"


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set to a true value (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE_VALUES


def resolve_model_dir(
    model: str, *, onnx_file: str, cache_dir: Path, hub_url: str, timeout: float
) -> Path:
    """Return a directory containing ``onnx_file`` and ``tokenizer.json`` for ``model``.

    ``model`` is a local directory or a hub name ``owner/name``. A hub model already in
    ``cache_dir`` is returned without any request; otherwise ``onnx_file``,
    ``tokenizer.json`` and ``config.json`` (required) and :data:`OPTIONAL_FILES` (skipped on
    404) are downloaded from ``{hub_url}/{model}/resolve/main/{path}``. ``timeout`` bounds
    connecting and each read, not a whole file.

    Raises :class:`ConfigurationError` when the directory lacks a file, the name is neither
    a directory nor a hub name, ``HF_HUB_OFFLINE`` is set and the model is not cached, or the
    download fails (unreachable, timeout, HTTP error, cache not writable).
    """
    onnx_path = _relative_file(onnx_file)
    local = Path(model).expanduser()
    if local.is_dir():
        missing = [f for f in (onnx_path, "tokenizer.json") if not (local / f).is_file()]
        if missing:
            raise ConfigurationError(
                f"embedding model directory {local} lacks {', '.join(missing)}; "
                f"{_HINT.format(onnx_file=onnx_path)}"
            )
        return local
    if not _HUB_NAME.match(model) or ".." in model:
        raise ConfigurationError(
            f"embedding model {model!r} is neither an existing directory nor a hub model name "
            f"like 'owner/name'; {_HINT.format(onnx_file=onnx_path)}"
        )

    owner, name = model.split("/")
    target = cache_dir.expanduser() / f"{owner}--{name}"
    required = ["tokenizer.json", "config.json", onnx_path]
    missing = [f for f in required if not (target / f).is_file()]
    if not missing:
        return target
    if hub_offline():
        raise ConfigurationError(
            f"embedding model {model!r} is not in the cache {target} and HF_HUB_OFFLINE is "
            f"set, so it cannot be downloaded; unset HF_HUB_OFFLINE or "
            f"{_HINT.format(onnx_file=onnx_path)}"
        )
    _download_model(
        model,
        target,
        missing=missing,
        hint=_HINT.format(onnx_file=onnx_path),
        hub_url=hub_url.rstrip("/"),
        timeout=timeout,
    )
    return target


def _relative_file(path: str) -> str:
    """Validate a file path inside a model directory (relative, no ``..``), POSIX style."""
    pure = PurePosixPath(path.replace("\\", "/"))
    if not path or pure.is_absolute() or ".." in pure.parts or str(pure) in {"", "."}:
        raise ConfigurationError(
            f"embedding onnx_file {path!r} must be a relative path inside the model directory "
            f"(e.g. 'onnx/model.onnx'); fix MEMMACHINE_EMBEDDING_ONNX_FILE"
        )
    return str(pure)


class _HubStatusError(Exception):
    """The hub answered a required file with a non-200 status."""

    def __init__(self, path: str, status: int) -> None:
        super().__init__(path, status)
        self.path = path
        self.status = status


def _download_model(
    model: str, target: Path, *, missing: list[str], hint: str, hub_url: str, timeout: float
) -> None:
    """Fetch the missing required files, then any optional file not yet present."""
    logger.info("downloading embedding model %s from %s into %s", model, hub_url, target)
    base = f"{hub_url}/{model}/resolve/main"
    optional = [f for f in OPTIONAL_FILES if not (target / f).is_file()]
    try:
        with httpx.Client(
            timeout=timeout, follow_redirects=True, headers={"User-Agent": "memmachine"}
        ) as client:
            for path in missing:
                _download_file(client, f"{base}/{path}", target / path, path, required=True)
            for path in optional:
                _download_file(client, f"{base}/{path}", target / path, path, required=False)
    except _HubStatusError as exc:
        detail = "not found (HTTP 404)" if exc.status == 404 else f"HTTP {exc.status}"
        raise ConfigurationError(
            f"could not download embedding model {model!r}: {exc.path} {detail} at {hub_url}; "
            f"check the model name and MEMMACHINE_EMBEDDING_ONNX_FILE, or "
            f"{hint}"
        ) from exc
    except httpx.TimeoutException as exc:
        raise ConfigurationError(
            f"could not download embedding model {model!r}: {hub_url} timed out after "
            f"{timeout:g}s; {hint}"
        ) from exc
    except httpx.ConnectError as exc:
        raise ConfigurationError(
            f"could not download embedding model {model!r}: {hub_url} is unreachable "
            f"({exc}); {hint}"
        ) from exc
    except httpx.HTTPError as exc:
        raise ConfigurationError(
            f"could not download embedding model {model!r}: the download from {hub_url} "
            f"failed ({type(exc).__name__}: {exc}); {hint}"
        ) from exc
    except OSError as exc:
        raise ConfigurationError(
            f"could not store embedding model {model!r} in {target}: {exc}; set "
            f"MEMMACHINE_EMBEDDING_CACHE_DIR to a writable directory, or "
            f"{hint}"
        ) from exc


def _download_file(
    client: httpx.Client, url: str, dest: Path, path: str, *, required: bool
) -> None:
    """Stream ``url`` into ``dest`` through a temporary file renamed into place when complete.

    A 404 on an optional file is skipped; any other non-200 status raises
    :class:`_HubStatusError`. A body shorter than its ``Content-Length`` raises (httpx
    does too), and the temporary file is removed on every failure.
    """
    started = time.monotonic()
    with client.stream("GET", url) as response:
        if response.status_code == 404 and not required:
            logger.debug("optional model file %s not on the hub, skipped", path)
            return
        if response.status_code != 200:
            raise _HubStatusError(path, response.status_code)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as fh:
                for chunk in response.iter_bytes(_CHUNK):
                    fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
            expected = response.headers.get("Content-Length")
            received = response.num_bytes_downloaded
            if expected is not None and expected.isdigit() and int(expected) != received:
                raise httpx.RemoteProtocolError(
                    f"{path}: received {received} of {expected} bytes", request=response.request
                )
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    logger.info(
        "downloaded model file %s (%.1f MB in %.1fs)",
        path,
        received / 1e6,
        time.monotonic() - started,
    )
