"""How a sentence-embedding model wants to be run: its pooling and its query / passage
prefixes, from the settings and from the files a sentence-transformers model directory holds.

* ``1_Pooling/config.json`` says the pooling: ``pooling_mode_cls_token`` (BGE) or
  ``pooling_mode_mean_tokens`` (MiniLM, E5). ``pooling="auto"`` takes it (mean when the file
  is missing); ``mean`` or ``cls`` set against what the file says is refused.
* ``config_sentence_transformers.json`` may name ``prompts``: ``{"query": "query: ",
  "passage": "passage: "}`` (``document`` is read as ``passage``). A prefix left unset
  (``None``) is taken from there, else none; a prefix set (even to ``""``) wins.
* Models whose card asks for what their directory does not say (the ONNX exports in
  registry packages carry no sentence-transformers files) are known by name: an E5 model run
  without its ``"query: "`` / ``"passage: "`` prefixes, or a BGE model mean-pooled, is
  refused.

Every refusal is a :class:`~memmachine.errors.ConfigurationError` naming the setting
(``MEMMACHINE_EMBEDDING_POOLING``, ``..._QUERY_PREFIX``, ``..._PASSAGE_PREFIX``) and what
the model wants, raised when the embedder is built, before anything is embedded or written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memmachine.errors import ConfigurationError

__all__ = ["EmbeddingRecipe", "Pooling", "PoolingSetting", "read_recipe"]

#: How token states become one vector: their mean over the text, or the first (CLS) token's.
Pooling = Literal["mean", "cls"]
PoolingSetting = Literal["auto", "mean", "cls"]

_POOLING_SETTING = "MEMMACHINE_EMBEDDING_POOLING"
_QUERY_SETTING = "MEMMACHINE_EMBEDDING_QUERY_PREFIX"
_PASSAGE_SETTING = "MEMMACHINE_EMBEDDING_PASSAGE_PREFIX"
_E5 = re.compile(r"(^|[^a-z0-9])(multilingual-)?e5([^a-z0-9]|$)")
_BGE = re.compile(r"(^|[^a-z0-9])bge([^a-z0-9]|$)")


@dataclass(frozen=True, slots=True)
class EmbeddingRecipe:
    """The pooling and the prefixes one model is run with."""

    pooling: Pooling = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""

    def name_suffix(self) -> list[str]:
        """What sets the stored vectors apart from a plain mean-pooled run (the query prefix
        does not: it changes queries only)."""
        parts: list[str] = ["cls"] if self.pooling == "cls" else []
        if self.passage_prefix:
            parts.append(f"passage prefix {self.passage_prefix!r}")
        return parts


def read_recipe(
    model_dir: Path,
    name: str,
    *,
    pooling: PoolingSetting = "auto",
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
) -> EmbeddingRecipe:
    """The recipe for the model in ``model_dir`` called ``name`` (its hub name or directory
    name) under these settings; ``ConfigurationError`` for a setting wrong for the model."""
    if pooling not in ("auto", "mean", "cls"):
        raise ConfigurationError(
            f"{_POOLING_SETTING} must be 'auto', 'mean' or 'cls', got {pooling!r}"
        )
    declared = _declared_pooling(model_dir / "1_Pooling" / "config.json")
    if pooling != "auto" and declared is not None and pooling != declared:
        raise ConfigurationError(
            f"{_POOLING_SETTING}={pooling} contradicts the model's "
            f"{model_dir / '1_Pooling' / 'config.json'}, which pools by {declared}: set "
            f"{declared} or auto"
        )
    family = name.lower()
    chosen: Pooling
    if declared is not None:
        chosen = declared
    elif pooling == "auto":
        chosen = "cls" if _BGE.search(family) else "mean"
    else:
        chosen = "cls" if pooling == "cls" else "mean"
    if chosen == "mean" and _BGE.search(family) and declared is None:
        raise ConfigurationError(
            f"{name} is a BGE model, which pools by its CLS token: set {_POOLING_SETTING}=cls "
            "(or auto)"
        )
    prompts = _declared_prompts(model_dir / "config_sentence_transformers.json")
    query = prompts.get("query", "") if query_prefix is None else query_prefix
    passage = prompts.get("passage", "") if passage_prefix is None else passage_prefix
    if _E5.search(family) and (not query.strip() or not passage.strip()):
        raise ConfigurationError(
            f"{name} is an E5 model, trained with 'query: ' before queries and "
            f"'passage: ' before stored texts: set {_QUERY_SETTING}='query: ' and "
            f"{_PASSAGE_SETTING}='passage: '"
        )
    return EmbeddingRecipe(pooling=chosen, query_prefix=query, passage_prefix=passage)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read model file {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _declared_pooling(path: Path) -> Pooling | None:
    """The pooling ``1_Pooling/config.json`` names; ``None`` without the file."""
    config = _read_json(path)
    if not config:
        return None
    modes = sorted(key for key, on in config.items() if key.startswith("pooling_mode_") and on)
    if modes == ["pooling_mode_cls_token"]:
        return "cls"
    if modes == ["pooling_mode_mean_tokens"]:
        return "mean"
    raise ConfigurationError(
        f"{path} asks for pooling {', '.join(modes) or 'none'}; the local embedder pools by "
        "mean or CLS only"
    )


def _declared_prompts(path: Path) -> dict[str, str]:
    """``query`` and ``passage`` prompts from ``config_sentence_transformers.json``."""
    prompts = _read_json(path).get("prompts")
    if not isinstance(prompts, dict):
        return {}
    found: dict[str, str] = {}
    for key, value in prompts.items():
        role = "passage" if key in ("passage", "document") else key
        if role in ("query", "passage") and isinstance(value, str):
            found[role] = value
    return found
