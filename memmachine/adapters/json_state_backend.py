"""The shared front of the state backends that keep an envelope as JSON text."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from memmachine.models import Scope
from memmachine.ports import check_expected_revision

__all__ = ["JsonStateBackend"]


class JsonStateBackend(ABC):
    """The shared front of the :class:`StateBackend` implementations that keep an envelope
    as JSON text (files, SQLite, Redis).

    :meth:`put` refuses a negative or non-integer ``expected_revision``
    (``InvalidInputError``), writes the envelope as JSON (non-ASCII kept as it is, no NaN or
    infinity) and hands the text to :meth:`_put_text`, which stores it under the
    :class:`StateBackend` contract's revision rules.
    """

    async def put(
        self,
        scope: Scope,
        name: str,
        envelope: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int:
        check_expected_revision(expected_revision)
        text = json.dumps(envelope, ensure_ascii=False, allow_nan=False)
        return await self._put_text(scope, name, text, expected_revision)

    @abstractmethod
    async def _put_text(
        self, scope: Scope, name: str, text: str, expected_revision: int | None
    ) -> int:
        """Store ``text`` (the envelope's JSON) as the record; the new revision, or
        :func:`stale_revision` when ``expected_revision`` is given and not current."""
