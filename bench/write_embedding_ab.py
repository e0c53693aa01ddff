"""Same-session A/B of the write path's embedding CPU: an older checkout against this one.

Runs ``bench/write_embedding_cpu.py`` (this tree's copy, the same file in both, so the same
turns, calls of 32, contexts and embedder settings) with each tree's own virtualenv and code,
one round of the default write profile per process, alternating old and new processes
(A B A B ...) so the shared machine's load falls on both alike. Reports each process's CPU
ms per episode, the medians and their ratio, and the load average before and after::

    git worktree add --detach ../wt-old <commit> && (cd ../wt-old && uv sync --locked)
    uv run python bench/write_embedding_ab.py --old ../wt-old --pairs 3 --conversation 0
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "write_embedding_cpu.py"
COPY_NAME = "_write_embedding_cpu_ab.py"


def run_once(tree: Path, conversation: int) -> tuple[float, float]:
    """One process in ``tree``: its CPU ms per episode and tokens run per episode."""
    script = SCRIPT if tree == REPO else tree / "bench" / COPY_NAME
    out = subprocess.run(
        [
            str(tree / ".venv" / "bin" / "python"),
            str(script),
            "--conversation",
            str(conversation),
            "--rounds",
            "1",
            "--profile",
            "default=",
        ],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    row = next(line for line in out.splitlines() if line.startswith("| default |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    return float(cells[1]), float(cells[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the older checkout (uv synced)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--conversation", type=int, default=0)
    args = parser.parse_args()
    old = args.old.resolve()
    copy = old / "bench" / COPY_NAME
    shutil.copyfile(SCRIPT, copy)
    runs: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    load_before = os.getloadavg()
    try:
        for _ in range(args.pairs):
            for name, tree in (("old", old), ("new", REPO)):
                runs[name].append(run_once(tree, args.conversation))
                print(f"{name}: {runs[name][-1][0]:.1f} CPU ms/episode", flush=True)
    finally:
        copy.unlink()
    load_after = os.getloadavg()
    print(f"load average before {load_before}, after {load_after}")
    print("| tree | CPU ms per episode (each process, in run order) | median | tokens/episode |")
    print("| --- | --- | ---: | ---: |")
    medians = {}
    for name, values in runs.items():
        medians[name] = statistics.median(cpu for cpu, _ in values)
        each = ", ".join(f"{cpu:.1f}" for cpu, _ in values)
        print(f"| {name} | {each} | {medians[name]:.1f} | {values[0][1]:.1f} |")
    print(f"old / new (medians): {medians['old'] / medians['new']:.2f}x")


if __name__ == "__main__":
    main()
