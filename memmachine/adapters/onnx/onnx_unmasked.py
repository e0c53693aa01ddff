"""A copy of an ONNX encoder without its attention-mask arithmetic, for unpadded batches.

The embedder never pads: every batch holds texts of one token count
(:func:`~memmachine.adapters.onnx.onnx_embedder.equal_length_batches`), so the attention
mask it feeds is all ones. The sentence-transformers exports still spend work on it: each
layer builds a ``Where(mask, 0, -inf)`` tensor of heads x tokens x tokens, adds it to the
attention scores, and after the softmax replaces NaNs (rows with nothing to attend to) by
zeros with ``IsNaN`` and another ``Where``. With an all-ones mask the first adds exact
zeros and the second never finds a NaN, so both are identities; :func:`unmasked_model`
writes a copy of the graph with them cut out, and its token states are bit-identical to the
source's for unpadded batches (about 5 % less CPU per run on all-MiniLM-L6-v2; see
bench/RESULTS.md, issue 22 item 6). The ``attention_mask`` input stays declared (unused), so
the copy takes the same feeds.

The copy is made only when the rewrite leaves the mask unused; for a graph of another shape
the source is used as it is. It lives in ``<cache_dir>/unmasked/<name>-<sha256 of the
source>/`` like the int8 copy (:func:`~memmachine.adapters.onnx.onnx_quantization.int8_model`),
written to a temporary file and renamed into place. Any failure (unreadable model, read-only
cache dir, a model too large to rewrite in memory) falls back to the source with a warning:
this is a speed-up, never a reason not to start.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from memmachine.adapters.onnx.onnx_quantization import source_digest

__all__ = ["UNMASKED_RECIPE", "unmasked_model"]

logger = logging.getLogger(__name__)

#: Names the rewrite; part of the cache path, so a new rewrite makes a new file.
UNMASKED_RECIPE = "unmasked-v1"
_MASK = "attention_mask"


def unmasked_model(source: Path, cache_dir: Path) -> Path | None:
    """The path of the mask-free copy of ``source`` (made if needed), or ``None`` when the
    source is to be used as it is (its graph has no removable mask arithmetic, or the copy
    cannot be made)."""
    try:
        digest = source_digest(source)
        target_dir = cache_dir.expanduser() / "unmasked" / f"{source.stem}-{digest[:16]}"
        target = target_dir / f"{source.stem}.{UNMASKED_RECIPE}.onnx"
        if target.is_file():
            return target
        import onnx

        model = onnx.load(str(source))
        if not _drop_mask(model.graph):
            logger.info("embedding model %s: no attention-mask arithmetic to remove", source)
            return None
        target_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target_dir, prefix=f".{target.name}.", suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            onnx.save(model, str(tmp))
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    except Exception as exc:
        logger.warning(
            "embedding model %s runs with its attention-mask arithmetic: the mask-free copy "
            "could not be made (%s)",
            source,
            exc,
        )
        return None
    logger.info("wrote the mask-free copy of embedding model %s: %s", source, target)
    return target


def _drop_mask(graph: Any) -> bool:
    """Cut the identities an all-ones mask makes out of ``graph`` (in place): ``Add`` of a
    ``Where(<mask-derived>, 0, <constant>)`` tensor, and ``Where(IsNaN(x), <c>, x)``. True
    when the mask is then unused (the graph was changed); False leaves ``graph`` as it was."""
    from onnx import numpy_helper

    producer = {out: node for node in graph.node for out in node.output}
    constants: dict[str, Any] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    constants[node.output[0]] = numpy_helper.to_array(attribute.t)
    from_mask = {_MASK}
    for node in graph.node:
        if any(name in from_mask for name in node.input):
            from_mask.update(node.output)
    zero_bias = {
        node.output[0]
        for node in graph.node
        if node.op_type == "Where"
        and node.input[0] in from_mask
        and node.input[1] in constants
        and node.input[2] in constants
        and constants[node.input[1]].size == 1
        and float(constants[node.input[1]].reshape(-1)[0]) == 0.0
    }
    replaced: dict[str, str] = {}
    kept = []
    for node in graph.node:
        inputs = list(node.input)
        if node.op_type == "Add" and len(inputs) == 2 and set(inputs) & zero_bias:
            replaced[node.output[0]] = inputs[1] if inputs[0] in zero_bias else inputs[0]
        elif (
            node.op_type == "Where"
            and inputs[0] in producer
            and producer[inputs[0]].op_type == "IsNaN"
            and producer[inputs[0]].input[0] == inputs[2]
        ):
            replaced[node.output[0]] = inputs[2]
        else:
            kept.append(node)
    outputs = {output.name for output in graph.output}
    if not replaced or outputs & set(replaced):
        return False

    def resolve(name: str) -> str:
        while name in replaced:
            name = replaced[name]
        return name

    needed = set(outputs)
    live = []
    for node in reversed(kept):
        if any(name in needed for name in node.output):
            live.append(node)
            needed.update(resolve(name) for name in node.input)
    if _MASK in needed:
        return False
    live.reverse()
    for node in live:
        for position, name in enumerate(node.input):
            node.input[position] = resolve(name)
    del graph.node[:]
    graph.node.extend(live)
    return True
