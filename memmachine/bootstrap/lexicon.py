"""The WordNet lexicon of the ``categories`` search stage, read once at startup.

``lexicon_dir`` (``MEMMACHINE_RETRIEVAL_LEXICON_DIR``) unset: no lexicon, the stage never
runs. Set to a directory that is missing or not in WordNet's format: startup stops with a
:class:`~memmachine.errors.ConfigurationError` naming the setting, rather than every search
failing later.
"""

from __future__ import annotations

import asyncio

from memmachine.config import RetrievalSettings
from memmachine.errors import ConfigurationError
from memmachine.retrieval.wordnet import Lexicon, load_lexicon

__all__ = ["LEXICON_SETTING", "configured_lexicon"]

LEXICON_SETTING = "MEMMACHINE_RETRIEVAL_LEXICON_DIR"


async def configured_lexicon(retrieval: RetrievalSettings) -> Lexicon | None:
    """WordNet's nouns from ``retrieval.lexicon_dir`` (read off the event loop: about a
    second of CPU), or None when it is unset."""
    directory = retrieval.lexicon_dir
    if directory is None:
        return None
    try:
        return await asyncio.to_thread(load_lexicon, directory.expanduser())
    except ConfigurationError as exc:
        raise ConfigurationError(f"{LEXICON_SETTING}={directory}: {exc}") from None
