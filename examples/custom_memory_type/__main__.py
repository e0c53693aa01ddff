"""``uv run python -m examples.custom_memory_type``: the reading list served by memmachine.

Registers :class:`ReadingList` through the ``memory_types`` setting (what
``MEMMACHINE_MEMORY_TYPES`` sets), stores three books for one user on the embedded stores,
closes memory, reopens it on the same data directory and retrieves them: what the REST route,
the MCP tools and the SDK do, without a server. Ends with ``RESULT custom_memory_type: ok``
(exit 0) or names what was missing (exit 1).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from memmachine import Settings, open_manager
from memmachine.config import EmbeddingSettings
from memmachine.models import Scope

REFERENCE = "examples.custom_memory_type:ReadingList"


async def main(data_dir: Path) -> int:
    settings = Settings(
        data_dir=data_dir,
        memory_types=[REFERENCE],
        # A reading list needs no embeddings; skip loading a model.
        embedding=EmbeddingSettings(provider="none"),
    )
    ana = Scope(user_id="ana")
    async with open_manager(settings) as memory:
        types = memory.memory_types
        for info in types.infos():
            print(f"registered {info.name}: {info.description}")
        for book in (
            {"title": "Dune", "author": "Frank Herbert", "status": "done"},
            {"title": "The Left Hand of Darkness", "author": "Ursula K. Le Guin"},
            {"title": "Middlemarch", "author": "George Eliot", "status": "reading"},
        ):
            stored = await types.store("reading_list", ana, book)
            print(f"stored   {stored['title']!r} ({stored['status']})")

    print("== restart: memory was closed above and is reopened on the same data directory ==")
    async with open_manager(settings) as memory:
        to_read = await memory.memory_types.retrieve("reading_list", ana, {"status": "to_read"})
        everything = await memory.memory_types.retrieve("reading_list", ana, {})
        other = await memory.memory_types.retrieve("reading_list", Scope(user_id="bob"), {})
    for book in everything:
        print(f"recalled {book['title']!r} by {book['author']} ({book['status']})")
    missing = []
    if [book["title"] for book in to_read] != ["The Left Hand of Darkness"]:
        missing.append("the one book still to read")
    if len(everything) != 3:
        missing.append("all three books")
    if other:
        missing.append("an empty list for another user")
    if missing:
        print(f"RESULT custom_memory_type: missing {', '.join(missing)}")
        return 1
    print("RESULT custom_memory_type: ok")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="memmachine-types-") as directory:
        sys.exit(asyncio.run(main(Path(directory))))
