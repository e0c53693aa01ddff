"""The torch embedder: a sentence-transformers model on a GPU (or the CPU).

Part of the GPU image: it needs the server's optional ``gpu`` extra (torch and
sentence-transformers), imported only by :meth:`SentenceTransformersEmbedder.start`.
Without them ``start()`` raises :class:`ConfigurationError` saying how to install them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memmachine.adapters.torch.torch_runtime import choose_device, import_torch_runtime, log_device
from memmachine.errors import ConfigurationError, InvalidInputError, StoreError
from memmachine.ports import Lifecycle

__all__ = ["SentenceTransformersEmbedder"]

_STORE = "embedder"


class SentenceTransformersEmbedder(Lifecycle):
    """Embeds texts with ``sentence_transformers.SentenceTransformer``.

    * ``model`` is a local model directory or a hub name (downloaded by sentence-transformers
      into ``cache_dir`` or its own cache; ``HF_HUB_OFFLINE=1`` forbids it).
    * ``device``: ``cuda``, ``cuda:1``, ``cpu``, ...; ``None`` = CUDA when available, else
      CPU. After ``start()`` the attribute holds the device in use (``cuda:0``...), which
      is also logged (a WARNING when a CUDA build of torch sees no GPU).
    * ``embed`` runs the model in a worker thread (one call at a time per embedder) in
      batches of ``batch_size`` and returns L2-normalised vectors in input order.
    * ``model`` (the attribute) is the hub name, or the directory's name for a local
      directory, so vectors of the same model match those of the ONNX embedder.

    ``start()`` raises :class:`ConfigurationError` when torch/sentence-transformers are
    missing or the model cannot be loaded; ``embed`` raises :class:`StoreError` with
    ``store="embedder"`` when inference fails or the embedder is not started.
    """

    name = "embedder"

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        batch_size: int = 64,
        cache_dir: Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be at least 1, got {batch_size}")
        self.source = model
        path = Path(model).expanduser()
        self.model: str = path.name if path.is_dir() else model
        self.device = device
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        #: Vector length; ``0`` until started.
        self.dimensions: int = 0
        self._model: Any = None
        self._lock = threading.Lock()

    async def start(self) -> None:
        """Import torch, pick the device and load the model in a worker thread; idempotent."""
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            torch, sentence_transformers = import_torch_runtime("the torch embedder")
            device = choose_device(torch, self.device, setting="MEMMACHINE_EMBEDDING_DEVICE")
            cache = str(self.cache_dir.expanduser()) if self.cache_dir else None
            try:
                model = sentence_transformers.SentenceTransformer(
                    self.source, device=device, cache_folder=cache
                )
                # sentence-transformers 6 renamed the method; 3 to 5 know only the old name.
                measure = getattr(model, "get_embedding_dimension", None) or (
                    model.get_sentence_embedding_dimension
                )
                dimensions = measure()
            except Exception as exc:
                raise ConfigurationError(
                    f"cannot load the sentence-transformers model {self.source!r} on {device}: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            if not isinstance(dimensions, int) or dimensions < 1:
                raise ConfigurationError(
                    f"the sentence-transformers model {self.source!r} does not state its "
                    "embedding dimension"
                )
            device = log_device(torch, f"torch embedder {self.model}", model, device)
            self._model, self.device, self.dimensions = model, device, dimensions

    async def close(self) -> None:
        """Release the model; idempotent. ``start()`` may load it again."""
        with self._lock:
            self._model = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in input order; ``[]`` for no texts."""
        if isinstance(texts, str):
            raise InvalidInputError(
                "embed() takes a sequence of texts, not a single string", field="texts"
            )
        if not texts:
            return []
        return await asyncio.to_thread(self._embed, list(texts))

    def _embed(self, texts: list[str]) -> list[list[float]]:
        # The lock serialises inference: a Hugging Face fast tokenizer must not be used by
        # two threads at once.
        with self._lock:
            model = self._model
            if model is None:
                raise StoreError("the torch embedder is not started", store=_STORE)
            try:
                vectors = model.encode(
                    texts,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except Exception as exc:
                raise StoreError(
                    f"torch inference failed: {type(exc).__name__}: {exc}", store=_STORE
                ) from exc
        out: list[list[float]] = vectors.astype("float32").tolist()
        if len(out) != len(texts) or any(len(vector) != self.dimensions for vector in out):
            raise StoreError("the torch embedder returned vectors of the wrong shape", store=_STORE)
        return out
