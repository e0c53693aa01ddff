"""Store and recall the three kinds of memory in-process, on embedded stores.

    uv run python examples/quickstart.py [data-dir]

Set MEMMACHINE_EMBEDDING_MODEL to a local model directory for search by meaning; without
one, search is lexical-only and says so in the log.
"""

from __future__ import annotations

import sys
import tempfile

from memmachine import MemoryLayer


def main() -> None:
    data_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mm-quickstart-")
    with MemoryLayer(session_id="onboarding", data_dir=data_dir) as memory:
        memory.store_episodic("ana", "I adopted a beagle called Toast", producer="Ana")
        memory.store_episodic("ana", "I'm allergic to peanuts", producer="Ana")
        memory.store_episodic("ben", "I'm training for the Berlin marathon", producer="Ben")
        memory.store_profile(
            "ana", {"pets": {"dog": "beagle named Toast"}, "health": {"allergy": "peanuts"}}
        )

        for hit in memory.retrieve_episodic("ana", "peanuts allergy", top_k=2):
            print(f"{hit['score']:.2f}  {hit['content']}")
        print(memory.retrieve_profile("ana"))
        # Ben's search only ever sees Ben's memories.
        print("ben:", [hit["content"] for hit in memory.retrieve_episodic("ben", "beagle")])


if __name__ == "__main__":
    main()
