"""CPU of the write path's embedding step, write profiles side by side in one process.

Embeds one LoCoMo conversation through :func:`memmachine.memory.embedding.embed_records`
(the step ``add_messages`` runs before storing), session by session in calls of 32 with
each message's context as ``add_messages`` builds it, once per profile per round, the
profiles interleaved so a shared machine's load falls on all alike. Reports process CPU ms
per episode (all threads: the measure that does not move with other people's load) and
tokens run per episode::

    uv run python bench/write_embedding_cpu.py        # window runs, the default, 256 tokens
    uv run python bench/write_embedding_cpu.py --conversation 1 --rounds 3 \\
        --profile windows=context_stretch_tokens=0 --profile default=
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from locomo_recall import DEFAULT_DATA, Turn, load  # noqa: E402

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder  # noqa: E402
from memmachine.bootstrap.embedders import build_embedder  # noqa: E402
from memmachine.config import EmbeddingSettings, RetrievalSettings  # noqa: E402
from memmachine.memory.embedding import embed_records  # noqa: E402
from memmachine.models import EpisodeRecord  # noqa: E402
from memmachine.retrieval.text import Said  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"


def calls(turns: list[Turn]) -> list[tuple[list[EpisodeRecord], list[list[Said]]]]:
    """The calls ``bench/locomo_recall.py`` makes, as records and contexts."""
    out: list[tuple[list[EpisodeRecord], list[list[Said]]]] = []
    sessions: dict[int, list[Turn]] = {}
    for turn in turns:
        sessions.setdefault(turn.session, []).append(turn)
    for session in sessions.values():
        said: list[Said] = []
        for start in range(0, len(session), 32):
            records, contexts = [], []
            for turn in session[start : start + 32]:
                records.append(
                    EpisodeRecord(
                        id=turn.dia_id,
                        role="user",
                        producer=turn.speaker,
                        content=turn.content,
                        timestamp=turn.timestamp,
                        metadata={},
                        search_text=turn.content,
                    )
                )
                contexts.append(said[-8:])
                said = [*said, (turn.speaker, turn.content)]
            out.append((records, contexts))
    return out


def _profile(text: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = text.partition("=")
    change = dict(part.split("=", 1) for part in rest.split(",") if part)
    return name, RetrievalSettings.model_validate(change).model_dump(include=set(change))


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversation", type=int, default=0, help="index in the data")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quantize", choices=("none", "int8"), default="none")
    parser.add_argument(
        "--profile",
        action="append",
        type=_profile,
        default=[],
        metavar="NAME=SETTING=VALUE,...",
        help="a write profile (RetrievalSettings changes), the first the reference",
    )
    args = parser.parse_args()
    profiles = dict(args.profile) or {
        "windows": {"context_stretch_tokens": 0},
        "default": {},
        "stretch256": {"context_stretch_tokens": 256},
    }
    turns, _ = load(DEFAULT_DATA, args.conversation + 1)
    conversation = list(turns.values())[args.conversation]
    settings = EmbeddingSettings(provider="local", model=str(MODEL), quantize=args.quantize)
    embedder = build_embedder(settings)
    assert isinstance(embedder, OnnxEmbedder), "the local model did not load"
    await embedder.start()
    counted: dict[str, int] = {}
    original = embedder.embed_spans

    async def counting(texts: Any, spans: Any) -> Any:
        counted["tokens"] = counted.get("tokens", 0) + sum(await embedder.count_tokens(texts))
        return await original(texts, spans)

    embedder.embed_spans = counting  # type: ignore[method-assign]
    cpu: dict[str, list[float]] = {name: [] for name in profiles}
    tokens: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, change in profiles.items():
            tuning = RetrievalSettings().model_copy(update=change)
            work = calls(conversation)
            counted.clear()
            began = time.process_time()
            for records, contexts in work:
                await embed_records(embedder, records, contexts, tuning)
            cpu[name].append((time.process_time() - began) * 1000 / len(conversation))
            tokens[name] = counted.get("tokens", 0)
    await embedder.close()
    base = next(iter(profiles))
    print(
        f"LoCoMo conversation {args.conversation}: {len(conversation)} turns, {args.rounds} rounds"
    )
    print("| profile | CPU ms per episode (each round) | tokens run per episode | ratio to first |")
    print("| --- | --- | ---: | ---: |")
    for name in profiles:
        rounds = ", ".join(f"{value:.1f}" for value in cpu[name])
        ratio = sum(cpu[base]) / sum(cpu[name])
        per = tokens[name] / len(conversation)
        print(f"| {name} | {rounds} | {per:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
