"""The model ports: embedders, rerankers and chat language models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

__all__ = [
    "ChatMessage",
    "Embedder",
    "LanguageModel",
    "QueryEmbedder",
    "Reranker",
    "ResultT",
    "SpanEmbedder",
    "SpanSet",
    "TokenCounter",
    "embed_queries",
]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a model will read in a text, for token budgets.

    Contract: ``count(text)`` is deterministic, ``0`` for ``""`` and at least ``1`` for any
    other text; it runs offline and fast (it is called per line of a prompt), so whatever it
    loads is loaded when it is built. ``name`` says which tokenizer counts (``estimate``,
    ``tiktoken:o200k_base``, ...), so an answer can say how its budget was kept. A counter
    that is not the provider's own must not count much below it: a budget kept by it must
    hold by the provider's count.
    """

    name: str

    def count(self, text: str) -> int: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors.

    Contract: ``start()`` loads the model or opens the connection (a remote embedder learns
    its ``dimensions`` here); ``dimensions`` is valid after it. ``embed(texts)`` returns one
    vector of length ``dimensions`` per text, in order, each L2-normalised; an empty input
    returns ``[]``. Batching is the embedder's business.
    Failures raise ``StoreError`` naming the embedder (it is a backend like any other).
    ``model`` identifies the model, so a store can refuse vectors from a different one.
    """

    name: str
    model: str
    dimensions: int

    async def start(self) -> None: ...
    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
    async def close(self) -> None: ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder whose model reads a search query differently from the text it searches:
    E5 models want ``"query: "`` before a query and ``"passage: "`` before a stored text, BGE
    models an instruction before the query only.

    Contract, besides :class:`Embedder`'s: ``embed(texts)`` embeds texts *to be stored and
    found* (passages); ``embed_queries(texts)`` embeds texts *that search* (queries), into
    the same space, with the same ``dimensions``, order, normalisation and errors. Callers
    never add a model's prefixes themselves: they call :func:`embed_queries`.
    """

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]: ...


async def embed_queries(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Vectors for texts that *search* (a query, a clause of one, a candidate fact looked up
    among the stored ones): ``embedder.embed_queries`` when the embedder tells queries from
    passages (:class:`QueryEmbedder`), else ``embedder.embed``. Every query call site goes
    through here, so an embedder gains query prefixes by implementing one method."""
    if isinstance(embedder, QueryEmbedder):
        return await embedder.embed_queries(texts)
    return await embedder.embed(texts)


#: Character ranges ``(start, end)`` of one text whose tokens are pooled into one vector.
SpanSet = Sequence[tuple[int, int]]


@runtime_checkable
class SpanEmbedder(Embedder, Protocol):
    """An embedder that can pool several vectors out of one run of its model over a text,
    so that a message read after the messages before it yields its own vector and its
    sentences' vectors, each informed by that context, for the price of one run.

    Contract, besides :class:`Embedder`'s (all valid after ``start()``): ``pools_spans``
    says whether this model can (a model that pools inside itself cannot; then the other
    two methods raise ``StoreError``). ``max_tokens`` is the most tokens the model reads of
    one text. ``count_tokens(texts)`` returns each text's token count for the model,
    special tokens included, however long the text. ``embed_spans(texts, spans)`` runs the
    model once per text and returns, per text, one vector per span set of ``spans[i]``, in
    order: the mean of the output states of the text's special tokens and of every token
    lying wholly inside one of the set's character ranges, L2-normalised. A set that covers
    the whole of a text that fits gives what ``embed`` gives. A text over ``max_tokens``
    tokens loses its *start* (its end is kept); a set left with none of its own tokens is
    ``None``. ``texts`` and ``spans`` of different lengths raise ``InvalidInputError``
    naming ``spans``.
    """

    pools_spans: bool
    max_tokens: int

    async def count_tokens(self, texts: Sequence[str]) -> list[int]: ...
    async def embed_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[SpanSet]]
    ) -> list[list[list[float] | None]]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores how relevant each text is to a query, reading both together (a cross-encoder).

    Contract: ``start()`` loads the model (idempotent: a started reranker stays as it is) and
    raises ``ConfigurationError`` when the model or its runtime cannot be had; ``close()``
    releases it and may be called twice. ``score(query, texts)`` returns one finite float per
    text, in input order, higher = more relevant to ``query``; the scale is the model's own
    and only the order of the scores within one call means something. An empty ``texts``
    returns ``[]``. Batching is the reranker's business. Failures while scoring (including a
    call before ``start()`` or after ``close()``) raise ``StoreError`` with
    ``store="reranker"``. ``model`` identifies the model; ``name`` is ``"reranker"``.
    """

    name: str
    model: str

    async def start(self) -> None: ...
    async def score(self, query: str, texts: Sequence[str]) -> list[float]: ...
    async def close(self) -> None: ...


# --------------------------------------------------------------------------- language model

ChatMessage = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

ResultT = TypeVar("ResultT", bound=BaseModel)


@runtime_checkable
class LanguageModel(Protocol):
    """A chat model behind any OpenAI-compatible endpoint (off the hot path only).

    Contract:

    * ``start()`` opens the client (no request is sent); ``close()`` may be called twice.
    * ``complete(messages, max_tokens)`` returns the assistant's text.
    * ``complete_structured(messages, result_type)`` returns a validated ``result_type``.
      The reply is parsed as JSON (a fenced or surrounded JSON object is extracted, small
      syntax slips are repaired); a reply that still does not validate is sent back to the
      model with the validation error, up to ``retries`` more times; then
      ``ModelOutputError`` (carrying the last raw reply) is raised.
    * Transport failures (unreachable, 5xx, 429 after bounded backoff) raise
      ``StoreError(store="llm")`` without the API key in the message.
    """

    name: str
    model: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None
    ) -> str: ...
    async def complete_structured(
        self,
        messages: Sequence[ChatMessage],
        result_type: type[ResultT],
        *,
        retries: int = 2,
    ) -> ResultT: ...


# --------------------------------------------------------------------------- jobs
