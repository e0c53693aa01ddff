"""An embedder over any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure, vLLM, ...).

Lifecycle: the constructor only stores settings. :meth:`OpenAIEmbedder.start` opens the HTTP
client and, when no ``dimensions`` were configured, learns them with one probe request;
:meth:`OpenAIEmbedder.close` closes the client. ``embed`` before ``start`` opens the client on
demand and takes ``dimensions`` from the first response.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from memmachine.errors import ConfigurationError, InvalidInputError, StoreError
from memmachine.ports import Lifecycle

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)

_STORE = "embedder"
_RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
#: A ``Retry-After`` longer than this is not waited for: the call fails at once instead.
_MAX_RETRY_AFTER = 10.0
_MAX_BACKOFF = 8.0
_TOKEN_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*.]{4,}|(?i:bearer)\s+\S+")


class OpenAIEmbedder(Lifecycle):
    """Embeds texts by POSTing them to ``{base_url}/embeddings`` in batches.

    * Sends ``{"model", "input": [...]}`` plus ``"dimensions"`` when configured, with
      ``Authorization: Bearer <api_key>`` when a key is given. An empty text is sent as a
      single space (the OpenAI API rejects empty strings).
    * Texts go out in batches of ``batch_size``, one request at a time; results are put
      back in input order by their ``index`` and L2-normalised (not every server does).
    * HTTP 408/409/429/5xx, connection errors and timeouts are retried up to
      ``max_retries`` times with exponential backoff from ``retry_backoff`` seconds (capped
      at 8 s, with jitter), waiting instead for ``Retry-After`` when the server sends one of
      at most 10 s; a longer ``Retry-After`` fails at once.
    * Every failure raises :class:`StoreError` with ``store="embedder"``, naming the HTTP
      status when there is one and never containing the API key.
    """

    name = "embedder"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be at least 1, got {batch_size}")
        if max_retries < 0:
            raise ConfigurationError(f"embedding max_retries must be 0 or more, got {max_retries}")
        if dimensions is not None and dimensions < 1:
            raise ConfigurationError(f"embedding dimensions must be at least 1, got {dimensions}")
        self.base_url = base_url.rstrip("/")
        self.model: str = model
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        #: Vector length: the configured one, else ``0`` until ``start()`` or the first
        #: response tells it.
        self.dimensions: int = dimensions or 0
        self._requested_dimensions = dimensions
        self._api_key = api_key or None
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(base_url={self.base_url!r}, model={self.model!r})"

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the HTTP client; without configured ``dimensions``, probe them with one call.

        Raises :class:`StoreError` when the probe fails.
        """
        self._closed = False
        self._ensure_client()
        if self.dimensions == 0:
            await self.embed(["dimension probe"])
            logger.info(
                "embedding endpoint %s serves %s with %d dimensions",
                self.base_url,
                self.model,
                self.dimensions,
            )

    async def close(self) -> None:
        """Close the HTTP client. Idempotent; ``embed`` then fails until ``start()`` again."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _ensure_client(self) -> httpx.AsyncClient:
        if self._closed:
            raise StoreError("the embedding client is closed", store=_STORE)
        if self._client is None:
            headers = {"Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                timeout=self.timeout, headers=headers, follow_redirects=False
            )
        return self._client

    # -- embedding -------------------------------------------------------------------------

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one L2-normalised vector per text, in input order (``[]`` for no texts).

        Raises :class:`StoreError` when the endpoint fails after retries, answers with
        something that is not one vector per input of the expected length, or the embedder
        was closed; :class:`InvalidInputError` for a lone ``str``.
        """
        if isinstance(texts, str):
            raise InvalidInputError(
                "embed() takes a sequence of texts, not a single string", field="texts"
            )
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [text or " " for text in texts[start : start + self.batch_size]]
            vectors.extend(await self._embed_batch(batch))
        return vectors

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": batch}
        if self._requested_dimensions is not None:
            payload["dimensions"] = self._requested_dimensions
        body = await self._post(payload)
        matrix = self._parse(body, len(batch))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        result: list[list[float]] = (matrix / np.maximum(norms, 1e-12)).tolist()
        return result

    async def _post(self, payload: dict[str, Any]) -> Any:
        """POST to ``/embeddings`` with retries; return the decoded JSON body."""
        client = self._ensure_client()
        url = f"{self.base_url}/embeddings"
        attempt = 0
        while True:
            delay: float
            try:
                response = await client.post(url, json=payload)
            except httpx.TimeoutException as exc:
                failure = f"the embedding endpoint {self.base_url} timed out ({type(exc).__name__})"
                delay = self._backoff(attempt)
            except httpx.TransportError as exc:
                failure = (
                    f"the embedding endpoint {self.base_url} is unreachable "
                    f"({type(exc).__name__}: {self._scrub(str(exc))})"
                )
                delay = self._backoff(attempt)
            except httpx.HTTPError as exc:
                raise StoreError(
                    f"embedding request failed: {self._scrub(str(exc))}", store=_STORE
                ) from exc
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise StoreError(
                            f"the embedding endpoint {self.base_url} returned invalid JSON",
                            store=_STORE,
                        ) from exc
                failure = self._describe(response)
                if response.status_code not in _RETRY_STATUS:
                    raise StoreError(failure, store=_STORE)
                retry_after = _retry_after_seconds(response.headers.get("Retry-After"))
                if retry_after is not None and retry_after > _MAX_RETRY_AFTER:
                    raise StoreError(
                        f"{failure}; the server asks to retry after {retry_after:.0f}s",
                        store=_STORE,
                    )
                delay = retry_after if retry_after is not None else self._backoff(attempt)
            if attempt >= self.max_retries:
                suffix = f" (after {attempt + 1} attempts)" if attempt else ""
                raise StoreError(f"{failure}{suffix}", store=_STORE)
            attempt += 1
            logger.warning(
                "%s; retrying in %.2fs (retry %d of %d)", failure, delay, attempt, self.max_retries
            )
            await asyncio.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter: ``retry_backoff * 2**attempt``, at most 8 s."""
        base: float = min(_MAX_BACKOFF, self.retry_backoff * (2**attempt))
        return base * (0.5 + random.random() / 2)

    def _describe(self, response: httpx.Response) -> str:
        """A one-line description of a failed response: status and the server's message."""
        status = response.status_code
        message = ""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                error = error.get("message")
            if isinstance(error, str):
                message = error
            elif isinstance(body.get("detail"), str):
                message = body["detail"]
        if not message:
            message = response.text[:200]
        message = " ".join(self._scrub(message).split())[:300]
        hint = ""
        if status in (401, 403):
            hint = " (check MEMMACHINE_EMBEDDING_API_KEY)"
        elif status == 404:
            hint = " (check MEMMACHINE_EMBEDDING_BASE_URL and MEMMACHINE_EMBEDDING_MODEL)"
        text = f"the embedding endpoint {self.base_url} answered HTTP {status}{hint}"
        return f"{text}: {message}" if message else text

    def _scrub(self, text: str) -> str:
        """Remove the API key (and anything that looks like a key) from ``text``."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return _TOKEN_LIKE.sub("***", text)

    def _parse(self, body: Any, count: int) -> npt.NDArray[np.float64]:
        """Check the response shape and return the vectors as rows in input order."""
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else "no"
            raise StoreError(
                f"the embedding endpoint returned {got} embeddings for {count} inputs",
                store=_STORE,
            )
        rows: list[list[float] | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < count or rows[index] is not None:
                raise StoreError(
                    f"the embedding endpoint returned a bad or repeated index {index!r}",
                    store=_STORE,
                )
            if not isinstance(vector, list) or not vector:
                raise StoreError(
                    "the embedding endpoint returned an embedding that is not a list of "
                    "floats (base64 encoding is not supported)",
                    store=_STORE,
                )
            rows[index] = vector
        try:
            matrix = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise StoreError(
                "the embedding endpoint returned embeddings of unequal length or non-numbers",
                store=_STORE,
            ) from exc
        if matrix.ndim != 2 or not np.isfinite(matrix).all():
            raise StoreError("the embedding endpoint returned malformed embeddings", store=_STORE)
        width = int(matrix.shape[1])
        if self.dimensions == 0:
            self.dimensions = width
        elif width != self.dimensions:
            raise StoreError(
                f"the embedding endpoint returned {width}-d vectors, expected {self.dimensions}",
                store=_STORE,
            )
        return matrix


def _retry_after_seconds(value: str | None) -> float | None:
    """Parse ``Retry-After`` (seconds or an HTTP date) into seconds from now, or ``None``."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
