"""The local embedder: a sentence-transformers style ONNX model run with onnxruntime on CPU.

No torch, no network: the model directory holds ``tokenizer.json`` (loaded with the
``tokenizers`` package) and an ONNX encoder whose token embeddings are mean-pooled over the
attention mask and L2-normalised, which is what sentence-transformers does for models such as
``all-MiniLM-L6-v2``.

Speed on a small CPU comes from five things, each measured in ``bench/embedder_throughput.py``:
a batch holds only texts of the same token count, so nothing is padded (see
:func:`equal_length_batches`); batches
run side by side on ``workers`` worker threads, each single-threaded inside onnxruntime
(on a shared 2-core machine this beats one batch on two intra-op threads, whose threads wait
for each other at every operator); onnxruntime's idle threads do not spin; the graph run is a
copy without the attention-mask arithmetic that unpadded batches do not need
(:mod:`memmachine.adapters.onnx.onnx_unmasked`); and, with
``quantize="int8"``, the model's matrix products run in int8 (see
:mod:`memmachine.adapters.onnx.onnx_quantization`). Single texts (search queries) are kept in a
small per-instance LRU cache.

Lifecycle: constructing an :class:`OnnxEmbedder` only stores its settings. The model is
loaded by :meth:`OnnxEmbedder.load` (synchronous, raises ``ConfigurationError``), by
:meth:`OnnxEmbedder.start` (the same, in a worker thread) or, failing both, by the first
:meth:`OnnxEmbedder.embed`. ``dimensions`` is ``0`` until the model is loaded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from memmachine.adapters.model_files import default_cache_dir
from memmachine.adapters.onnx.onnx_quantization import int8_model
from memmachine.adapters.onnx.onnx_recipe import EmbeddingRecipe, PoolingSetting, read_recipe
from memmachine.adapters.onnx.onnx_unmasked import unmasked_model
from memmachine.errors import ConfigurationError, InvalidInputError, StoreError
from memmachine.ports import Lifecycle, SpanSet

__all__ = [
    "DEFAULT_ONNX_FILE",
    "OnnxEmbedder",
    "Quantize",
    "QueryCacheInfo",
    "available_cpus",
    "deal_batches",
    "device_line",
    "equal_length_batches",
    "variant_name",
]

#: The ONNX file of a sentence-transformers model directory.
DEFAULT_ONNX_FILE = "onnx/model.onnx"
#: ``none`` runs the ONNX file as it is; ``int8`` runs an int8 copy made once on this machine.
Quantize = Literal["none", "int8"]

logger = logging.getLogger(__name__)

_STORE = "embedder"
_INT_TYPES: dict[str, type[np.signedinteger[Any]]] = {
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


class _Loaded:
    """Everything :meth:`OnnxEmbedder.load` produces; immutable once built."""

    def __init__(
        self,
        *,
        tokenizer: Tokenizer,
        tail_tokenizer: Tokenizer,
        count_tokenizer: Tokenizer,
        session: ort.InferenceSession,
        output_name: str,
        input_dtypes: dict[str, type[np.signedinteger[Any]]],
        pad_id: int,
        token_states: bool,
        unmasked: bool,
    ) -> None:
        #: Cuts a long text at its end (``embed``), at its start (``embed_spans``), never.
        self.tokenizer = tokenizer
        self.tail_tokenizer = tail_tokenizer
        self.count_tokenizer = count_tokenizer
        #: Whether the model returns one state per token (so spans can be pooled).
        self.token_states = token_states
        self.session = session
        self.output_name = output_name
        self.input_dtypes = input_dtypes
        self.pad_id = pad_id
        #: Whether the session runs the mask-free copy (:mod:`.onnx_unmasked`): every batch
        #: it is given must be unpadded.
        self.unmasked = unmasked


class QueryCacheInfo(NamedTuple):
    """What :meth:`OnnxEmbedder.query_cache_info` reports, as ``functools.lru_cache`` does."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def variant_name(
    base: str,
    onnx_file: str = DEFAULT_ONNX_FILE,
    quantize: Quantize = "none",
    recipe: Sequence[str] = (),
) -> str:
    """The embedding model name recorded with stored vectors: ``base``, plus what differs.

    Vectors from another ONNX file or from the int8 copy are not interchangeable with the
    default file's, so those are named ``"<base> [<onnx_file>, int8]"`` (only the parts that
    differ from ``onnx/model.onnx`` without quantisation), and so are vectors pooled another
    way or embedded with a passage prefix (``recipe``:
    :meth:`~memmachine.adapters.onnx.onnx_recipe.EmbeddingRecipe.name_suffix`); stores
    refuse to mix names.
    """
    parts = [onnx_file] if onnx_file != DEFAULT_ONNX_FILE else []
    if quantize != "none":
        parts.append(quantize)
    parts.extend(recipe)
    return f"{base} [{', '.join(parts)}]" if parts else base


class OnnxEmbedder(Lifecycle):
    """Embeds texts with an ONNX sentence-embedding model on this machine's CPU.

    * ``model_dir`` holds ``tokenizer.json``, ``onnx_file`` (relative to it) and usually
      ``config.json``.
    * Texts are truncated at ``max_tokens`` tokens (capped at the model's
      ``max_position_embeddings`` when ``config.json`` states it); an empty text is embedded
      as is (only the special tokens).
    * ``embed`` tokenises the whole call once, batches texts of the same token count
      together (nothing is padded) and returns vectors in input order. Batches hold at
      most ``batch_size`` texts, and fewer when that gives every worker a batch; the
      batches are dealt to ``workers`` worker threads that run at once (the event loop
      never waits on inference). ``workers=0`` means one per available CPU.
    * ``threads`` is onnxruntime's intra-op threads per batch; ``0`` means the available
      CPUs divided among the workers (so ``1`` with the default ``workers``).
    * ``quantize="int8"`` runs an int8 copy of ``onnx_file`` made once into
      ``<cache_dir>/int8/`` (``cache_dir`` defaults to
      :func:`~memmachine.adapters.model_files.default_cache_dir`); its vectors differ
      slightly from the float model's (mean cosine ≈0.99 on chat turns) and depend slightly
      on which texts share a batch (cosine > 0.99).
    * ``drop_mask`` (the default) runs a copy of the ONNX file without the attention-mask
      arithmetic, made once into ``<cache_dir>/unmasked/``
      (:mod:`memmachine.adapters.onnx.onnx_unmasked`): batches are never padded, so it
      gives bit-identical vectors for ≈5 % less CPU. ``False`` runs the file as it is.
    * ``device`` is ``cpu`` (the default) or ``cuda``/``cuda:<n>``: onnxruntime's CUDA
      provider when this onnxruntime has one (``onnxruntime-gpu``), the CPU otherwise. The
      load log line says where it really runs, from the providers the session reports;
      a CUDA device asked for and not obtained is logged at WARNING (:func:`device_line`).
    * A call with a single text (a search query) is answered from a per-instance LRU cache
      of the last ``query_cache_size`` such texts (``0`` disables it); callers get their own
      copy of each vector.
    * ``model`` is :func:`variant_name` of ``model_name`` (or the directory's name),
      ``onnx_file`` and ``quantize``: it names the embedding space the vectors live in.
    * It is a :class:`~memmachine.ports.SpanEmbedder`: ``embed_spans`` pools several
      vectors from one run over a text (batched and sorted like ``embed``; a text over
      ``max_tokens`` keeps its last tokens). ``pools_spans`` is true once a model that
      returns token states is loaded.

    Loading failures (missing files, unreadable tokenizer, invalid ONNX, unsupported inputs)
    raise :class:`ConfigurationError` naming the path; failures while embedding raise
    :class:`StoreError` with ``store="embedder"``.
    """

    name = "embedder"

    def __init__(
        self,
        model_dir: Path,
        *,
        onnx_file: str = DEFAULT_ONNX_FILE,
        max_tokens: int = 256,
        batch_size: int = 64,
        threads: int = 0,
        workers: int = 0,
        quantize: Quantize = "none",
        device: str | None = None,
        cache_dir: Path | None = None,
        query_cache_size: int = 1024,
        model_name: str | None = None,
        drop_mask: bool = True,
        pooling: PoolingSetting = "auto",
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
    ) -> None:
        if max_tokens < 2:
            raise ConfigurationError(f"embedding max_tokens must be at least 2, got {max_tokens}")
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be at least 1, got {batch_size}")
        if threads < 0:
            raise ConfigurationError(f"embedding threads must be 0 or more, got {threads}")
        if workers < 0:
            raise ConfigurationError(f"embedding workers must be 0 or more, got {workers}")
        if quantize not in ("none", "int8"):
            raise ConfigurationError(
                f"embedding quantize must be 'none' or 'int8', got {quantize!r}"
            )
        if query_cache_size < 0:
            raise ConfigurationError(
                f"embedding query_cache_size must be 0 or more, got {query_cache_size}"
            )
        self.model_dir = Path(model_dir)
        self.onnx_file = onnx_file
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        cpus = available_cpus()
        self.workers = workers or cpus
        self.threads = threads or max(1, cpus // self.workers)
        self.quantize: Quantize = quantize
        self.device = (device or "cpu").strip() or "cpu"
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigurationError(
                f"embedding device must be 'cpu', 'cuda' or 'cuda:<n>', got {device!r}"
            )
        self.cache_dir = cache_dir
        self.drop_mask = drop_mask
        self.query_cache_size = query_cache_size
        base = model_name or self.model_dir.name
        #: Pooling and prefixes (:mod:`.onnx_recipe`), read from the model directory now: a
        #: setting wrong for the model raises ``ConfigurationError`` here.
        self.recipe: EmbeddingRecipe = read_recipe(
            self.model_dir,
            base,
            pooling=pooling,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
        )
        self.model: str = variant_name(base, onnx_file, quantize, self.recipe.name_suffix())
        #: Vector length; ``0`` until the model is loaded.
        self.dimensions: int = 0
        self._loaded: _Loaded | None = None
        self._closed = False
        self._load_lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._cache_hits = 0
        self._cache_misses = 0

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded and ready to embed."""
        return self._loaded is not None

    # -- lifecycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Load the tokenizer and the ONNX session (blocking; idempotent, thread-safe).

        Raises :class:`ConfigurationError` naming the offending path when a file is missing
        or unusable.
        """
        self._acquire()

    def _acquire(self) -> _Loaded:
        """Load unless loaded (under the lock) and return what is loaded; reopens if closed."""
        with self._load_lock:
            if self._loaded is None:
                self._loaded = self._load()
            self._closed = False
            return self._loaded

    async def start(self) -> None:
        """Load the model in a worker thread; see :meth:`load`."""
        await asyncio.to_thread(self.load)

    async def close(self) -> None:
        """Release the ONNX session and empty the query cache. Idempotent;
        ``start()``/``load()`` may load it again."""
        with self._load_lock:
            self._loaded = None
            self._closed = True
        with self._cache_lock:
            self._cache.clear()

    # -- embedding -------------------------------------------------------------------------

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one L2-normalised vector per text to be stored (the recipe's passage prefix
        before each), in input order (``[]`` for no texts).

        Loads the model first when needed (a loading failure then surfaces as a
        :class:`StoreError`). Raises :class:`StoreError` when tokenising or inference fails,
        or when the embedder was closed; :class:`InvalidInputError` for a lone ``str``.
        """
        _check_texts(texts)
        return await self._embed([self.recipe.passage_prefix + text for text in texts])

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """As :meth:`embed`, for search queries: the recipe's query prefix before each."""
        _check_texts(texts)
        return await self._embed([self.recipe.query_prefix + text for text in texts])

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        query = texts[0] if len(texts) == 1 and self.query_cache_size else None
        if query is not None:
            cached = self._cache_get(query)
            if cached is not None:
                return [list(cached)]
        loaded = await self._ensure_loaded()
        encodings = await asyncio.to_thread(self._tokenize, loaded.tokenizer, texts)
        out = np.empty((len(encodings), self.dimensions), dtype=np.float32)

        def infer(idx: list[int]) -> None:
            out[idx] = self._infer(loaded, [encodings[i] for i in idx])

        await self._in_batches(encodings, infer)
        result: list[list[float]] = out.tolist()
        if query is not None:
            self._cache_put(query, tuple(result[0]))
        return result

    @property
    def pools_spans(self) -> bool:
        """Whether :meth:`embed_spans` can run: a loaded model that returns token states,
        mean-pooled (a CLS-pooled model has one vector per run, not one per span)."""
        loaded = self._loaded
        return loaded is not None and loaded.token_states and self.recipe.pooling == "mean"

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's token count for this model, special tokens included, uncut."""
        _check_texts(texts)
        loaded = await self._ensure_loaded()
        prefixed = [self.recipe.passage_prefix + text for text in texts]
        encodings = await asyncio.to_thread(self._tokenize, loaded.count_tokenizer, prefixed)
        return [len(encoding.ids) for encoding in encodings]

    async def embed_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[SpanSet]]
    ) -> list[list[list[float] | None]]:
        """One run per text, one pooled vector per span set (see
        :class:`~memmachine.ports.SpanEmbedder`); errors as :meth:`embed`. With a passage
        prefix, each text is run after it and every set also pools the prefix's tokens (a
        mean-pooled model was trained with them in its mean)."""
        _check_texts(texts)
        if len(spans) != len(texts):
            raise InvalidInputError(
                f"{len(spans)} span lists for {len(texts)} texts", field="spans"
            )
        if not texts:
            return []
        loaded = await self._ensure_loaded()
        if not self.pools_spans:
            raise StoreError(
                f"the ONNX model {self.model} pools inside itself or by its CLS token: no "
                "spans to pool",
                store=_STORE,
            )
        prefix = self.recipe.passage_prefix
        if prefix:
            shift, head = len(prefix), (0, len(prefix))
            texts = [prefix + text for text in texts]
            spans = [
                [[head, *((a + shift, b + shift) for a, b in ranges)] for ranges in sets]
                for sets in spans
            ]
        encodings = await asyncio.to_thread(self._tokenize, loaded.tail_tokenizer, list(texts))
        out: list[list[list[float] | None]] = [[] for _ in encodings]

        def infer(idx: list[int]) -> None:
            pooled = self._infer_spans(loaded, [encodings[i] for i in idx], [spans[i] for i in idx])
            for i, vectors in zip(idx, pooled, strict=True):
                out[i] = [None if vector is None else vector.tolist() for vector in vectors]

        await self._in_batches(encodings, infer)
        return out

    async def _in_batches(
        self, encodings: list[Encoding], infer: Callable[[list[int]], None]
    ) -> None:
        """Call ``infer`` with the positions of each batch (:func:`equal_length_batches`),
        the batches dealt to ``workers`` worker threads (:func:`deal_batches`) that run at
        once, each its batches in turn."""
        lengths = [len(encoding) for encoding in encodings]
        size = min(self.batch_size, math.ceil(len(lengths) / self.workers))
        batches = equal_length_batches(lengths, size)
        shares = deal_batches(batches, lengths, self.workers)

        def run(share: list[list[int]]) -> None:
            for idx in share:
                infer(idx)

        if len(shares) == 1:
            await asyncio.to_thread(run, shares[0])
        else:
            await asyncio.gather(*(asyncio.to_thread(run, share) for share in shares))

    def query_cache_info(self) -> QueryCacheInfo:
        """Hits and misses of the single-text cache since construction, and its size."""
        with self._cache_lock:
            return QueryCacheInfo(
                self._cache_hits, self._cache_misses, self.query_cache_size, len(self._cache)
            )

    def _cache_get(self, text: str) -> tuple[float, ...] | None:
        with self._cache_lock:
            vector = self._cache.get(text)
            if vector is None:
                self._cache_misses += 1
            else:
                self._cache_hits += 1
                self._cache.move_to_end(text)
            return vector

    def _cache_put(self, text: str, vector: tuple[float, ...]) -> None:
        with self._cache_lock:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self.query_cache_size:
                self._cache.popitem(last=False)

    async def _ensure_loaded(self) -> _Loaded:
        if self._closed:
            raise StoreError("the ONNX embedder is closed", store=_STORE)
        loaded = self._loaded
        if loaded is not None:
            return loaded
        try:
            return await asyncio.to_thread(self._acquire)
        except ConfigurationError as exc:
            raise StoreError(f"the ONNX embedder cannot load: {exc.message}", store=_STORE) from exc

    @staticmethod
    def _tokenize(tokenizer: Tokenizer, texts: list[str]) -> list[Encoding]:
        try:
            encodings: list[Encoding] = tokenizer.encode_batch(texts)
        except Exception as exc:
            raise StoreError(f"tokenising failed: {exc}", store=_STORE) from exc
        return encodings

    def _token_states(
        self, loaded: _Loaded, batch: list[Encoding]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Pad one batch to its longest text and run the model: its output and the mask."""
        rows, width = len(batch), max(len(e) for e in batch)
        mask = np.zeros((rows, width), dtype=np.int64)
        ids = np.full((rows, width), loaded.pad_id, dtype=np.int64)
        types = np.zeros((rows, width), dtype=np.int64)
        for row, encoding in enumerate(batch):
            length = len(encoding.ids)
            ids[row, :length] = encoding.ids
            mask[row, :length] = encoding.attention_mask
            types[row, :length] = encoding.type_ids
        if loaded.unmasked and not mask.all():
            # equal_length_batches never pads and the tokenizers do not pad; a padded batch
            # here would be a bug, and the mask-free graph would attend to the padding.
            raise StoreError("a padded batch reached the mask-free ONNX model", store=_STORE)
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {
            name: arrays[name].astype(dtype, copy=False)
            for name, dtype in loaded.input_dtypes.items()
        }
        try:
            output = loaded.session.run([loaded.output_name], feeds)[0]
        except Exception as exc:
            raise StoreError(f"ONNX inference failed: {exc}", store=_STORE) from exc
        return np.asarray(output, dtype=np.float32), mask

    def _check_width(self, width: int) -> None:
        if width != self.dimensions:
            raise StoreError(
                f"ONNX model returned {width}-d vectors, expected {self.dimensions}",
                store=_STORE,
            )

    def _infer(self, loaded: _Loaded, batch: list[Encoding]) -> npt.NDArray[np.float32]:
        """Run one batch, pool each text (the mean over its tokens, or its first token's
        state with ``cls``) and normalise."""
        hidden, mask = self._token_states(loaded, batch)
        if hidden.ndim == 3 and self.recipe.pooling == "cls":
            pooled = hidden[:, 0, :]
        elif hidden.ndim == 3:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        elif hidden.ndim == 2:
            pooled = hidden
        else:
            raise StoreError(f"ONNX model returned an output of shape {hidden.shape}", store=_STORE)
        self._check_width(pooled.shape[1])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalised: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return normalised

    def _infer_spans(
        self, loaded: _Loaded, batch: list[Encoding], spans: Sequence[Sequence[SpanSet]]
    ) -> list[list[npt.NDArray[np.float32] | None]]:
        """Run one batch and pool each span set of each text over the special tokens and
        the tokens wholly inside one of its ranges; ``None`` for a set with none of those."""
        hidden, _ = self._token_states(loaded, batch)
        if hidden.ndim != 3:
            raise StoreError(f"ONNX model returned an output of shape {hidden.shape}", store=_STORE)
        self._check_width(hidden.shape[2])
        out: list[list[npt.NDArray[np.float32] | None]] = []
        for row, (encoding, sets) in enumerate(zip(batch, spans, strict=True)):
            states = hidden[row, : len(encoding.ids)]
            special = np.asarray(encoding.special_tokens_mask, dtype=bool)
            offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
            starts, ends = offsets[:, 0], offsets[:, 1]
            real = (ends > starts) & ~special
            vectors: list[npt.NDArray[np.float32] | None] = []
            for ranges in sets:
                inside = np.zeros(len(starts), dtype=bool)
                for low, high in ranges:
                    inside |= real & (starts >= low) & (ends <= high)
                if not inside.any():
                    vectors.append(None)
                    continue
                vector = states[inside | special].mean(axis=0)
                vector /= max(float(np.linalg.norm(vector)), 1e-12)
                vectors.append(vector.astype(np.float32))
            out.append(vectors)
        return out

    # -- loading ---------------------------------------------------------------------------

    def _load(self) -> _Loaded:
        model_dir = self.model_dir
        tokenizer_path = model_dir / "tokenizer.json"
        onnx_path = model_dir / self.onnx_file
        if not model_dir.is_dir():
            raise ConfigurationError(f"embedding model directory {model_dir} does not exist")
        for path in (tokenizer_path, onnx_path):
            if not path.is_file():
                raise ConfigurationError(f"embedding model file {path} is missing")
        config = self._read_config(model_dir / "config.json")
        if self.quantize == "int8":
            onnx_path = int8_model(onnx_path, self.cache_dir or default_cache_dir())
        unmasked = (
            unmasked_model(onnx_path, self.cache_dir or default_cache_dir())
            if self.drop_mask
            else None
        )
        onnx_path = unmasked or onnx_path

        max_tokens = self.max_tokens
        max_positions = config.get("max_position_embeddings")
        if isinstance(max_positions, int) and 2 <= max_positions < max_tokens:
            logger.info(
                "embedding max_tokens %d capped at the model's %d positions",
                max_tokens,
                max_positions,
            )
            max_tokens = max_positions

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise ConfigurationError(f"cannot load tokenizer {tokenizer_path}: {exc}") from exc
        padding = tokenizer.padding
        pad_id = int(padding["pad_id"]) if padding else (tokenizer.token_to_id("[PAD]") or 0)
        tokenizer.no_padding()
        tokenizer.no_truncation()
        count_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        tail_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        tokenizer.enable_truncation(max_length=max_tokens)
        tail_tokenizer.enable_truncation(max_length=max_tokens, direction="left")

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        # Spinning threads burn a core while waiting for work: on a machine shared with the
        # stores (and other processes) that CPU is worth more than the microseconds saved.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(
                str(onnx_path), sess_options=options, providers=_providers(self.device)
            )
        except Exception as exc:
            raise ConfigurationError(f"cannot load ONNX model {onnx_path}: {exc}") from exc

        input_dtypes: dict[str, type[np.signedinteger[Any]]] = {}
        for model_input in session.get_inputs():
            dtype = _INT_TYPES.get(model_input.type)
            if model_input.name not in {"input_ids", "attention_mask", "token_type_ids"}:
                raise ConfigurationError(
                    f"ONNX model {onnx_path} needs an unsupported input {model_input.name!r}"
                )
            if dtype is None:
                raise ConfigurationError(
                    f"ONNX model {onnx_path} input {model_input.name!r} has unsupported "
                    f"type {model_input.type}"
                )
            input_dtypes[model_input.name] = dtype
        for needed in ("input_ids", "attention_mask"):
            if needed not in input_dtypes:
                raise ConfigurationError(f"ONNX model {onnx_path} has no {needed!r} input")

        outputs = session.get_outputs()
        names = [o.name for o in outputs]
        output = outputs[names.index("last_hidden_state") if "last_hidden_state" in names else 0]
        shape = list(output.shape or [])
        dimensions = shape[-1] if shape and isinstance(shape[-1], int) else None
        if dimensions is None:
            hidden_size = config.get("hidden_size")
            dimensions = hidden_size if isinstance(hidden_size, int) else None
        loaded = _Loaded(
            tokenizer=tokenizer,
            tail_tokenizer=tail_tokenizer,
            count_tokenizer=count_tokenizer,
            session=session,
            output_name=output.name,
            input_dtypes=input_dtypes,
            pad_id=pad_id,
            token_states=len(shape) != 2,
            unmasked=onnx_path == unmasked,
        )
        if dimensions is None:
            dimensions = self._probe_dimensions(loaded, onnx_path)
        self.dimensions = dimensions
        self.max_tokens = max_tokens
        level, where = device_line(self.device, session.get_providers())
        logger.log(
            level,
            "loaded embedding model %s (%s, %d dimensions, max %d tokens, %d workers x %d "
            "threads); %s",
            self.model,
            onnx_path,
            dimensions,
            max_tokens,
            self.workers,
            self.threads,
            where,
        )
        return loaded

    @staticmethod
    def _read_config(path: Path) -> dict[str, Any]:
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read model config {path}: {exc}") from exc
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _probe_dimensions(loaded: _Loaded, onnx_path: Path) -> int:
        """Run one empty text through the model to learn its output width."""
        encoding = loaded.tokenizer.encode("")
        feeds = {
            name: np.asarray([getattr(encoding, _FEED_ATTRS[name])], dtype=dtype)
            for name, dtype in loaded.input_dtypes.items()
        }
        try:
            output = loaded.session.run([loaded.output_name], feeds)[0]
        except Exception as exc:
            raise ConfigurationError(f"cannot run ONNX model {onnx_path}: {exc}") from exc
        return int(np.asarray(output).shape[-1])


def _providers(device: str) -> list[str | tuple[str, dict[str, str]]]:
    """onnxruntime's providers for ``device``: the CPU alone, or CUDA (on the device number
    after ``cuda:``) with the CPU behind it for what CUDA does not run; CUDA is asked for
    only when this onnxruntime offers it (else the load log line warns, see
    :func:`device_line`)."""
    if device == "cpu" or "CUDAExecutionProvider" not in ort.get_available_providers():
        return ["CPUExecutionProvider"]
    number = device.partition(":")[2] or "0"
    return [("CUDAExecutionProvider", {"device_id": number}), "CPUExecutionProvider"]


def device_line(device: str, active: Sequence[str]) -> tuple[int, str]:
    """The log level and the words that say where the model really runs, from the providers
    the session reports in use (``active``), not from what was asked for: onnxruntime drops
    a CUDA provider it cannot load (no GPU, no CUDA build, missing libraries) and runs on
    the CPU with only a note of its own, so a CUDA device asked for and not obtained is a
    WARNING."""
    providers = ", ".join(active)
    if "CUDAExecutionProvider" in active:
        return logging.INFO, f"it runs on {device} (onnxruntime {providers})"
    if device != "cpu":
        return logging.WARNING, (
            f"it runs on the CPU, not on {device}: this onnxruntime has no usable CUDA "
            f"provider (active: {providers}; available: "
            f"{', '.join(ort.get_available_providers())}; install onnxruntime-gpu and give "
            "the process a GPU)"
        )
    return logging.INFO, f"it runs on the CPU (onnxruntime {providers})"


def equal_length_batches(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Positions grouped into batches of texts with the same token count, at most ``size``
    each, longest first: no batch is padded at all.

    Padding is not free even under the attention mask: every padded position goes through
    every matrix product. LoCoMo messages read in their windows are 120 tokens on average,
    and sorted batches of 16 padded them to 150 (a quarter more work); with equal lengths
    only, the same ingestion took 27 % less CPU (bench/RESULTS.md, issue 22 item 6). A text
    whose length no other text shares runs alone, which costs little for a model this
    small."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for index in order:
        last = batches[-1] if batches else None
        if last is not None and len(last) < size and lengths[last[0]] == lengths[index]:
            last.append(index)
        else:
            batches.append([index])
    return batches


def deal_batches(
    batches: list[list[int]], lengths: Sequence[int], workers: int
) -> list[list[list[int]]]:
    """The batches split into at most ``workers`` shares of about equal work (tokens), each
    batch to the share with the least so far, longest batches first."""
    shares: list[list[list[int]]] = [[] for _ in range(min(workers, len(batches)))]
    work = [0] * len(shares)
    for batch in batches:
        lightest = work.index(min(work))
        shares[lightest].append(batch)
        work[lightest] += lengths[batch[0]] * len(batch)
    return shares


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise InvalidInputError(
            "embed() takes a sequence of texts, not a single string", field="texts"
        )


_FEED_ATTRS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
