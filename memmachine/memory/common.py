"""What every memory service checks the same way."""

from __future__ import annotations

from memmachine.errors import InvalidInputError
from memmachine.models import Scope

__all__ = ["require_session"]


def require_session(scope: Scope) -> Scope:
    """``scope``, which must name a session (``InvalidInputError`` naming ``session_id``)."""
    if scope.session_id is None:
        raise InvalidInputError("session_id is required", field="session_id")
    return scope
