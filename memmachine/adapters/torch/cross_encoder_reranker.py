"""The cross-encoder reranker: ``sentence_transformers.CrossEncoder`` on a GPU (or the CPU).

Part of the GPU image: it needs the server's optional ``gpu`` extra (torch and
sentence-transformers), imported only by :meth:`CrossEncoderReranker.start`. Without them
``start()`` raises :class:`ConfigurationError` saying how to install them.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memmachine.adapters.torch.torch_runtime import choose_device, import_torch_runtime, log_device
from memmachine.errors import ConfigurationError, InvalidInputError, StoreError
from memmachine.ports import Lifecycle

__all__ = ["CrossEncoderReranker"]

_STORE = "reranker"


class CrossEncoderReranker(Lifecycle):
    """Scores (query, text) pairs with a single-output cross-encoder.

    * ``model`` is a local model directory or a hub name (e.g.
      ``cross-encoder/ms-marco-MiniLM-L6-v2``); the model must have one output label.
    * ``device``: ``cuda``, ``cuda:1``, ``cpu``, ...; ``None`` = CUDA when available, else
      CPU. After ``start()`` the attribute holds the device in use.
    * Each pair is truncated to ``max_length`` tokens and scored in batches of
      ``batch_size`` in a worker thread (one call at a time per reranker). Scores are the
      model's output after its default activation (a sigmoid for most single-label models).

    ``start()`` raises :class:`ConfigurationError` when torch/sentence-transformers are
    missing or the model cannot be loaded; ``score`` raises :class:`StoreError` with
    ``store="reranker"`` when inference fails or the reranker is not started.
    """

    name = "reranker"

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        batch_size: int = 32,
        max_length: int = 512,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"reranker batch_size must be at least 1, got {batch_size}")
        if max_length < 8:
            raise ConfigurationError(f"reranker max_length must be at least 8, got {max_length}")
        self.source = model
        path = Path(model).expanduser()
        self.model: str = path.name if path.is_dir() else model
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self._model: Any = None
        self._lock = threading.Lock()

    async def start(self) -> None:
        """Import torch, pick the device and load the model in a worker thread; idempotent."""
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            torch, sentence_transformers = import_torch_runtime("the cross-encoder reranker")
            device = choose_device(torch, self.device, setting="MEMMACHINE_RERANKER_DEVICE")
            try:
                model = sentence_transformers.CrossEncoder(
                    self.source, device=device, max_length=self.max_length
                )
            except Exception as exc:
                raise ConfigurationError(
                    f"cannot load the cross-encoder {self.source!r} on {device}: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            labels = getattr(model, "num_labels", None)
            if labels is None:  # sentence-transformers before 4 keeps it on the config only
                labels = getattr(getattr(model, "config", None), "num_labels", None)
            if labels != 1:
                raise ConfigurationError(
                    f"the cross-encoder {self.source!r} has {labels} output labels; a reranker "
                    "needs a model with one relevance score"
                )
            device = log_device(torch, f"cross-encoder reranker {self.model}", model, device)
            self._model, self.device = model, device

    async def close(self) -> None:
        """Release the model; idempotent. ``start()`` may load it again."""
        with self._lock:
            self._model = None

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text, in input order, higher = more relevant."""
        if isinstance(texts, str):
            raise InvalidInputError(
                "score() takes a sequence of texts, not a single string", field="texts"
            )
        if not texts:
            return []
        return await asyncio.to_thread(self._score, query, list(texts))

    def _score(self, query: str, texts: list[str]) -> list[float]:
        with self._lock:
            model = self._model
            if model is None:
                raise StoreError("the cross-encoder reranker is not started", store=_STORE)
            try:
                raw = model.predict(
                    [(query, text) for text in texts],
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except Exception as exc:
                raise StoreError(
                    f"cross-encoder inference failed: {type(exc).__name__}: {exc}", store=_STORE
                ) from exc
        scores = [float(value) for value in raw.reshape(-1).tolist()]
        if len(scores) != len(texts) or not all(math.isfinite(value) for value in scores):
            raise StoreError("the cross-encoder returned unusable scores", store=_STORE)
        return scores
