"""Short codes for a disk-cold first pass: how far off they are, and how many rows each leaves.

A disk-cold search of a 100k-episode user reads the int8 codes of every episode and sentence
vector (69 MB) for its exact first pass; at this machine's ≈1.1 GB/s that alone is more than
the 50 ms the issue allows. This probe asks whether a much shorter code of every vector,
read instead, would leave few enough rows to rescore from their float32 vectors (each a
scattered read of ≈18 µs) while still keeping the exact top k.

On one index file (the bench's, e.g. the 100k user's of ``bench/scale.py --data-dir``) and
the bench's queries embedded by the real model, every vector (episode and sentence) is
centred on the mean vector, rotated by one seeded random orthogonal matrix and coded:

* ``1-bit``: RaBitQ's sign code (``ō = sign(Po)/√D``; estimate ``<ō,Pq>/<ō,Po>``);
* ``2-bit`` / ``3-bit`` / ``4-bit``: a symmetric uniform grid per vector, its step chosen
  per vector among a few to minimise the coding error (extended-RaBitQ-like), estimate
  ``<x̂,Pq>``.

Beside them, two rigorous references: ``int8 (today)``, the index's own codes and per-vector
errors (the query left unquantised), and ``PCA d dims, int8`` (``--pca``): the centred vector
projected on the data's d leading principal axes ``U`` and coded in int8, bounded by
``|U^T q|·(code error) + |q - U U^T q|·(residual off the axes)``. That bound is only tight
when the vectors nearly lie in d dimensions, which the bench's vectors (sums of the word
vectors of a 193-word vocabulary) do and real sentence embeddings do not.

For each code, per vector: the estimate's real error against the exact cosine, its rigorous
bound (Cauchy-Schwarz: the residual's norm ``r``) and the estimator's scale ``sd = r/√(D-1)``
(RaBitQ's: the error of a random rotation is ≈ normal with that deviation). A row's estimate
is the best (weighted) estimate of its own vector and its sentence vectors, and its bound the
largest (weighted) bound among them. Rows rescored, as ``ScopeIndex.vector_top`` does: the k
best estimates first, their lowest exact score as a floor, then every row whose estimate plus
its bound reaches the floor — (a) with the rigorous bound, (b) with ``c·sd``, ``c`` such that
a miss has probability ≤ ``--delta`` per query (a union over the k true best rows of a normal
tail), (c) the oracle: the rank, in the estimates' order, of the last true top-k row (a
floor for a scheme that takes rows in that order; a bound that differs per row can do
better, as the PCA codes' do).

    uv run python bench/short_codes.py --index <the user's .idx> --queries 100 --k 60

Prints a Markdown table (and ``--json`` the raw figures). CPU of the short pass over every
row: each code as packed bit planes against a 4-bit query (RaBitQ's bit-sliced product),
one simsimd Hamming kernel call per pair of planes (``--unpack``: the 4-bit code unpacked
to int8 and multiplied by simsimd instead). The estimated time of a disk-cold first pass:
the short codes at ``--gbps`` plus the p95 rows rescored at ``--row-us`` each (scattered
float32 reads, announced at once) plus its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import simsimd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale

from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.indexing.index_columns import dot

#: Candidate steps of the symmetric grid, as fractions of the step that reaches the largest
#: component (the best per vector is kept).
_STEP_FRACTIONS = (0.55, 0.65, 0.75, 0.85, 1.0)


def load(path: Path) -> tuple[Any, dict[str, Any]]:
    """The index opened from ``path`` as the server opens it, and its arrays."""
    with path.open("rb") as file:
        head = file.read(16)
        (length,) = struct.unpack("<Q", head[8:16])
        header = json.loads(file.read(length))
    files = SearchIndexFiles(path.parent.parent, header["store"])
    index = files.open(header["user"])
    if index is None:
        raise SystemExit(f"{path}: not an index file of this format")
    n, m = index.rows, index._m
    owners = index._part_owner.view(m).astype(np.int64)
    errors = _int8_errors(index, n, m)
    return index, {
        "vectors": np.ascontiguousarray(index._vectors.take(np.arange(n))),
        "parts": np.ascontiguousarray(index._parts.take(np.arange(m))),
        "owners": owners,
        "weights": index._part_weights.view(m).astype(np.float64),
        "has_vector": index._has_vector.view(n).copy(),
        "codes": np.asarray(index._codes.take(np.arange(n))),
        "part_codes": np.asarray(index._part_codes.take(np.arange(m))),
        "scales": index._scales.view(n).astype(np.float32),
        "part_scales": index._part_scales.view(m).astype(np.float32),
        "errors": errors[:n],
        "part_errors": errors[n:],
    }


def _int8_errors(index: Any, n: int, m: int) -> np.ndarray:
    """Each vector's int8 coding error (L2), recomputed from its vector and code."""
    out = []
    for matrix, codes, scales, count in (
        (index._vectors, index._codes, index._scales, n),
        (index._parts, index._part_codes, index._part_scales, m),
    ):
        for start in range(0, count, 8192):
            rows = np.arange(start, min(count, start + 8192))
            decoded = codes.take(rows).astype(np.float32) / scales.view(count)[rows, None]
            out.append(np.linalg.norm(matrix.take(rows) - decoded, axis=1).astype(np.float64))
    return np.concatenate(out)


def rotation(dimensions: int, seed: int) -> np.ndarray:
    """A seeded random orthogonal matrix (QR of a Gaussian one, signs fixed)."""
    gaussian = np.random.default_rng(seed).standard_normal((dimensions, dimensions))
    q, r = np.linalg.qr(gaussian)
    return (q * np.sign(np.diag(r))).astype(np.float32)


def sign_code(o: np.ndarray) -> dict[str, np.ndarray]:
    """RaBitQ's 1-bit code of unit rows ``o``: decoded ``x̂ = ō/<ō,o>``."""
    d = o.shape[1]
    bits = o >= 0
    ob = np.where(bits, 1.0, -1.0).astype(np.float32) / math.sqrt(d)
    a = np.einsum("ij,ij->i", ob, o).astype(np.float64)
    return {"bits": bits[:, None, :], "decoded": ob / a[:, None].astype(np.float32)}


def grid_code(o: np.ndarray, bits: int) -> dict[str, np.ndarray]:
    """A symmetric uniform grid of ``2**bits`` levels per row of ``o``, step chosen per row
    among :data:`_STEP_FRACTIONS` of the largest component's, rescaled by least squares."""
    levels = 2**bits
    half = levels / 2
    peak = np.abs(o).max(axis=1, keepdims=True)
    best_err = np.full(len(o), np.inf)
    best_u = np.zeros(o.shape, dtype=np.uint8)
    for fraction in _STEP_FRACTIONS:
        step = peak * fraction / (half - 0.5)
        u = np.clip(np.floor(o / step + half), 0, levels - 1).astype(np.uint8)
        c = (u.astype(np.float32) - (half - 0.5)) * step
        t = np.einsum("ij,ij->i", c, o) / np.einsum("ij,ij->i", c, c)
        err = np.linalg.norm(o - c * t[:, None], axis=1)
        better = err < best_err
        best_err[better] = err[better]
        best_u[better] = u[better]
    c = best_u.astype(np.float32) - (half - 0.5)
    t = np.einsum("ij,ij->i", c, o) / np.einsum("ij,ij->i", c, c)
    planes = np.stack([(best_u >> b) & 1 for b in range(bits)], axis=1).astype(bool)
    return {"bits": planes, "decoded": (c * t[:, None]).astype(np.float32)}


def code_all(x: np.ndarray, centre: np.ndarray, rot: np.ndarray, bits: int) -> dict[str, Any]:
    """Centre, rotate and code the rows ``x``; the residual norms (rigorous bounds)."""
    d = x - centre
    norm = np.linalg.norm(d, axis=1).astype(np.float64)
    o = (d / np.maximum(norm, 1e-12)[:, None]) @ rot.T
    coded = sign_code(o) if bits == 1 else grid_code(o, bits)
    residual = np.linalg.norm(o - coded["decoded"], axis=1).astype(np.float64) * norm
    return {"norm": norm, "decoded": coded["decoded"], "bits": coded["bits"], "r": residual}


def best_per_row(
    own: np.ndarray, parts: np.ndarray, owners: np.ndarray, weights: np.ndarray, has: np.ndarray
) -> np.ndarray:
    """Each row's best of its own value and its sentence vectors' weighted values."""
    out = np.where(has, own, -np.inf)
    np.maximum.at(out, owners, parts * weights)
    return out


_STATS = (
    "max_err",
    "p999_err",
    "max_z",
    "rig",
    "prob",
    "loose",
    "orac",
    "miss_rig",
    "miss_p",
    "miss_l",
)


def principal_axes(centred: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` leading principal axes of ``centred`` rows (dims x width)."""
    covariance = centred.T.astype(np.float64) @ centred.astype(np.float64)
    _, vectors = np.linalg.eigh(covariance)
    return vectors[:, ::-1][:, :width].astype(np.float32)


def pca_code(x: np.ndarray, centre: np.ndarray, basis: np.ndarray) -> dict[str, np.ndarray]:
    """Rows ``x`` projected on ``basis`` and coded in int8 (largest component to ±127):
    with the code's error and the residual off the basis, a rigorous bound is
    ``|U^T q| * error + |q - U U^T q| * residual``."""
    d = x - centre
    p = d @ basis
    peak = np.maximum(np.abs(p).max(axis=1, keepdims=True), 1e-12)
    codes = np.rint(p * (127.0 / peak)).astype(np.int8)
    decoded = codes.astype(np.float32) * (peak / 127.0)
    error = np.linalg.norm(p - decoded, axis=1).astype(np.float64)
    residual = np.linalg.norm(d - p @ basis.T, axis=1).astype(np.float64)
    return {"codes": codes, "decoded": decoded, "error": error, "residual": residual}


def _timed(work: Any, rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def rescored(est: np.ndarray, bound: np.ndarray, exact: np.ndarray, k: int) -> tuple[int, bool]:
    """Rows ``vector_top``'s scheme rescores with ``bound``, and whether the true top k
    were all among them."""
    first = np.argpartition(-est, k - 1)[:k]
    floor = exact[first].min()
    chosen = est + bound >= floor
    chosen[first] = True
    truth = np.argpartition(-exact, k - 1)[:k]
    kth = exact[truth].min()
    kept = bool(np.all(chosen[exact >= kth]))
    return int(chosen.sum()), kept


def oracle(est: np.ndarray, exact: np.ndarray, k: int) -> int:
    """How many rows, taken in the estimates' order, hold every true top-k row."""
    truth = np.argpartition(-exact, k - 1)[:k]
    kth = exact[truth].min()
    lowest = est[exact >= kth].min()
    return int(np.count_nonzero(est >= lowest))


def normal_c(delta: float, k: int) -> float:
    """``c`` with ``k · P(Z < -c) ≤ delta`` for a standard normal ``Z``."""
    target = delta / k
    lo, hi = 0.0, 40.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(mid / math.sqrt(2)) > target:
            lo = mid
        else:
            hi = mid
    return hi


def pass_cpu_ms(planes: np.ndarray, q_rot: np.ndarray, rounds: int = 5) -> float:
    """Median ms of a short pass over bit planes (rows x planes x D bits) against a 4-bit
    query: ``Σ_b Σ_p 2^(b+p) popcount(code_p & query_b)``, each popcount from simsimd's
    Hamming kernel (``(popcount(a) + popcount(b) - hamming(a, b)) / 2``), one plane pair
    at a time over contiguous packed planes."""
    packed = [
        np.ascontiguousarray(np.packbits(planes[:, p, :], axis=1)) for p in range(planes.shape[1])
    ]
    ones = [np.bitwise_count(plane).sum(axis=1, dtype=np.int64) for plane in packed]
    lo, hi = float(q_rot.min()), float(q_rot.max())
    qu = np.clip(np.rint((q_rot - lo) / (hi - lo) * 15), 0, 15).astype(np.uint8)
    qplanes = [np.packbits(((qu >> b) & 1).astype(bool))[None, :] for b in range(4)]
    qones = [int(np.bitwise_count(plane).sum()) for plane in qplanes]
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        total = np.zeros(len(planes), dtype=np.float64)
        for p, plane in enumerate(packed):
            for b, qplane in enumerate(qplanes):
                hamming = np.asarray(simsimd.cdist(qplane, plane, metric="hamming", dtype="bin8"))[
                    0
                ]
                total += (ones[p] + qones[b] - hamming) * (2 ** (p + b) / 2)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def int8_cpu_ms(planes: np.ndarray, q_rot: np.ndarray, rounds: int = 5) -> float:
    """Median ms of unpacking nibble codes to int8 and one simsimd product."""
    u = np.zeros(planes.shape[::2], dtype=np.uint8)
    for p in range(planes.shape[1]):
        u |= planes[:, p, :].astype(np.uint8) << p
    nibbles = (u[:, 0::2] | (u[:, 1::2] << 4)).copy()
    q8 = np.rint(q_rot / np.abs(q_rot).max() * 127).astype(np.int8)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        unpacked = np.empty((len(nibbles), nibbles.shape[1] * 2), dtype=np.int8)
        unpacked[:, 0::2] = (nibbles & 15).view(np.int8)
        unpacked[:, 1::2] = (nibbles >> 4).view(np.int8)
        dot(unpacked, q8)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    index, data = load(args.index)
    vectors, parts = data["vectors"], data["parts"]
    owners, weights, has = data["owners"], data["weights"], data["has_vector"]
    n, m, dims = len(vectors), len(parts), vectors.shape[1]
    print(f"{n:,} episode vectors, {m:,} sentence vectors, {dims} dims", file=sys.stderr)
    queries = scale.make_queries(args.queries, args.seed)
    embedder = OnnxEmbedder(args.model)
    await_embed = asyncio.run(_embed(embedder, queries))
    qs = np.asarray(await_embed, dtype=np.float32)
    if qs.shape[1] != dims:  # a test's index of another width: random queries (smoke only)
        print("  the model's width differs: random queries", file=sys.stderr)
        qs = np.random.default_rng(args.seed).standard_normal((len(qs), dims)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    everything = np.concatenate([vectors[has], parts])
    centre = everything.mean(axis=0).astype(np.float32)
    rot = rotation(dims, args.seed)
    exact_own, exact_parts = vectors @ qs.T, parts @ qs.T
    c, loose = normal_c(args.delta, args.k), normal_c(args.loose_delta, args.k)
    mask = np.ones(n, dtype=bool)
    out: dict[str, Any] = {"rows": n, "sentence_rows": m, "k": args.k, "c": c, "loose": loose}
    out.update({"delta": args.delta, "loose_delta": args.loose_delta, "codes": {}})
    out.update({"gbps": args.gbps, "row_us": args.row_us})

    def evaluate(name: str, mb: float, cpu: float, per_query: Any) -> None:
        """Fill ``out["codes"][name]`` from ``per_query(qi)``: the estimates of the own and
        sentence vectors, their rigorous bounds, and their deviations (or ``None``)."""
        stats: dict[str, list[float]] = {key: [] for key in _STATS}
        for qi in range(len(qs)):
            est_own, est_parts, rig_own, rig_parts, sd_own, sd_parts = per_query(qi)
            err = np.abs(
                np.concatenate([est_own - exact_own[:, qi], est_parts - exact_parts[:, qi]])
            )
            stats["max_err"].append(float(err.max()))
            stats["p999_err"].append(float(np.quantile(err, 0.999)))
            exact = best_per_row(exact_own[:, qi], exact_parts[:, qi], owners, weights, has)
            est = best_per_row(est_own, est_parts, owners, weights, has)
            rig = best_per_row(rig_own, rig_parts, owners, weights, has)
            rig = np.where(np.isfinite(rig), rig, 0.0) + 1e-6
            count, kept = rescored(est, rig, exact, args.k)
            stats["rig"].append(count)
            stats["miss_rig"].append(0 if kept else 1)
            stats["orac"].append(oracle(est, exact, args.k))
            if sd_own is not None:
                stats["max_z"].append(float((err / np.concatenate([sd_own, sd_parts])).max()))
                sd = best_per_row(sd_own, sd_parts, owners, weights, has)
                sd = np.where(np.isfinite(sd), sd, 0.0) + 1e-6
                for key, miss, factor in (("prob", "miss_p", c), ("loose", "miss_l", loose)):
                    count, kept = rescored(est, factor * sd, exact, args.k)
                    stats[key].append(count)
                    stats[miss].append(0 if kept else 1)
            if qi == 0:  # the index's own answer: the exact top k are what the probe calls exact
                top = index.vector_top(qs[qi], args.k, mask)
                mine = np.argsort(-exact, kind="stable")[: args.k]
                ids = {index._ids[int(row)] for row in mine}
                agree = len(ids & {key for key, _ in top})
                print(f"  sanity: {agree}/{args.k} of the index's top k", file=sys.stderr)
        out["codes"][name] = {"mb": mb, "cpu_ms": cpu, **stats}
        print(f"  {name} done", file=sys.stderr)

    # today's first pass: the index's own int8 codes and per-vector errors (rigorous)
    codes = np.concatenate([data["codes"], data["part_codes"]])
    q8 = np.zeros(dims, dtype=np.int8)
    cpu = _timed(functools.partial(dot, codes, q8))
    del codes

    def today(qi: int) -> tuple[Any, ...]:
        q = qs[qi]
        est_own = (data["codes"] @ q) / data["scales"]
        est_parts = (data["part_codes"] @ q) / data["part_scales"]
        return est_own, est_parts, data["errors"], data["part_errors"], None, None

    evaluate("int8 (today)", (n + m) * (dims + 4) / 1e6, cpu, today)
    q_rot = qs @ rot.T
    for bits in args.bits:
        own_code = code_all(vectors, centre, rot, bits)
        part_code = code_all(parts, centre, rot, bits)
        code_bytes = (n + m) * (dims * bits // 8 + 8)  # code + norm and residual (float32)
        planes = np.concatenate([own_code["bits"], part_code["bits"]])
        cpu = (
            pass_cpu_ms(planes, q_rot[0])
            if bits < 4 or not args.unpack
            else int8_cpu_ms(planes, q_rot[0])
        )
        del planes

        def rotated(qi: int, own: Any = own_code, part: Any = part_code) -> tuple[Any, ...]:
            base = float(centre @ qs[qi])
            est_own = base + own["norm"] * (own["decoded"] @ q_rot[qi])
            est_parts = base + part["norm"] * (part["decoded"] @ q_rot[qi])
            scale_ = 1 / math.sqrt(dims - 1)
            return est_own, est_parts, own["r"], part["r"], own["r"] * scale_, part["r"] * scale_

        evaluate(f"{bits}-bit", code_bytes / 1e6, cpu, rotated)
    for width in args.pca:
        basis = principal_axes(everything - centre, width)
        own_code, part_code = pca_code(vectors, centre, basis), pca_code(parts, centre, basis)
        codes = np.concatenate([own_code["codes"], part_code["codes"]])
        cpu = _timed(functools.partial(dot, codes, own_code["codes"][0]))
        del codes

        def projected(
            qi: int, own: Any = own_code, part: Any = part_code, basis: Any = basis
        ) -> tuple[Any, ...]:
            q = qs[qi]
            inside = basis.T @ q
            outside = math.sqrt(max(0.0, 1.0 - float(inside @ inside)))
            base, length = float(centre @ q), float(np.linalg.norm(inside))
            ests = [base + (code["decoded"] @ inside) for code in (own, part)]
            bounds = [length * code["error"] + outside * code["residual"] for code in (own, part)]
            return ests[0], ests[1], bounds[0], bounds[1], None, None

        evaluate(f"PCA {width} dims, int8", (n + m) * (width + 8) / 1e6, cpu, projected)
    return out


async def _embed(embedder: OnnxEmbedder, texts: list[str]) -> list[list[float]]:
    await embedder.start()
    try:
        return await embedder.embed(texts)
    finally:
        await embedder.close()


def _pct(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))


def table(result: dict[str, Any]) -> str:
    lines = [
        f"k = {result['k']}, {result['rows']:,} episodes + {result['sentence_rows']:,} sentence "
        f"vectors; c = {result['c']:.2f} (δ = {result['delta']:g} per query), "
        f"c' = {result['loose']:.2f} (δ = {result['loose_delta']:g}); rows rescored as "
        "p50 / p95 / max over the queries (misses of the true top k in brackets); est. ms: "
        f"short codes at {result['gbps']} GB/s + p95 rows (c·sd) x {result['row_us']} µs + CPU",
        "",
        "| code | MB | CPU ms | error max / p99.9 | max error/sd | (a) rigorous: rows "
        "| (b) c·sd: rows | (b') c'·sd: rows | (c) oracle: rows | est. ms (b) |",
        "| --- | ---: | ---: | --- | ---: | --- | --- | --- | --- | ---: |",
    ]
    for name, s in result["codes"].items():
        z = max(s["max_z"], default=float("nan"))

        def cell(key: str, miss: str | None = None, s: dict[str, Any] = s) -> str:
            v = s[key]
            if not v:
                return "-"
            text = f"{_pct(v, 0.5):,.0f} / {_pct(v, 0.95):,.0f} / {max(v):,.0f}"
            return f"{text} ({sum(s[miss]):.0f})" if miss else text

        rows = _pct(s["prob"] or s["rig"], 0.95)  # the rigorous bound's when it has no sd
        estimate = s["mb"] / result["gbps"] + rows * result["row_us"] / 1e3
        lines.append(
            f"| {name} | {s['mb']:.1f} | {s['cpu_ms']:.1f} | {max(s['max_err']):.4f} / "
            f"{max(s['p999_err']):.4f} | {z:.2f} | {cell('rig', 'miss_rig')} | "
            f"{cell('prob', 'miss_p')} | {cell('loose', 'miss_l')} | {cell('orac')} | "
            f"{estimate + s['cpu_ms']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", type=Path, required=True, help="a search index file (.idx)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7, help="the bench's seed (its queries)")
    parser.add_argument("--k", type=int, default=60, help="the search's fetch depth")
    parser.add_argument(
        "--bits", type=lambda t: [int(b) for b in t.split(",")], default=[1, 2, 3, 4]
    )
    parser.add_argument("--delta", type=float, default=1e-6, help="miss probability per query")
    parser.add_argument("--loose-delta", type=float, default=1e-2, help="a looser one")
    parser.add_argument("--gbps", type=float, default=1.1, help="the disk's read rate")
    parser.add_argument("--row-us", type=float, default=18.0, help="µs per rescored row")
    parser.add_argument(
        "--pca",
        type=lambda t: [int(b) for b in t.split(",") if b],
        default=[128, 192],
        help="also: int8 codes of the leading principal components, rigorous bound",
    )
    parser.add_argument(
        "--unpack", action="store_true", help="time the 4-bit code unpacked to int8 instead"
    )
    parser.add_argument("--model", type=Path, default=scale.DEFAULT_MODEL)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = measure(args)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
