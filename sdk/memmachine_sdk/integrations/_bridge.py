"""What the adapters share: one code path for their sync and async sides, and the
working-memory calls of the adapters bound to a session.

Frameworks ask for both sides (LangGraph's ``batch``/``abatch``, LangChain's ``messages``
and ``aget_messages``...). An adapter writes each operation once, as a *plan*: a generator
that yields SDK calls (a function of the client) and receives their results, or has the
SDK's error thrown into it. :meth:`Clients.run` carries a plan out with a
:class:`Client`, :meth:`Clients.arun` with an :class:`AsyncClient` (or, given only a sync
client, in a worker thread); the two clients have the same methods, so the plan does not
know which.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, TypeVar

from memmachine_sdk import models as m
from memmachine_sdk._client import AsyncClient, Client
from memmachine_sdk.errors import MemMachineError

__all__ = ["Clients", "Plan", "SessionAdapter", "Step"]

T = TypeVar("T")

#: One SDK call: given the client, the call (awaitable for an :class:`AsyncClient`).
Step = Callable[[Client | AsyncClient], Any]
#: An operation: yields steps, receives each step's result, returns the operation's result.
Plan = Generator[Step, Any, T]


class _Cursor(Generic[T]):
    """Where a plan stands: the outcome of its last step, then its result."""

    def __init__(self, plan: Plan[T]) -> None:
        self.plan = plan
        self.outcome: Any = None
        self.error: MemMachineError | None = None
        self.result: T | None = None

    def next_step(self) -> Step | None:
        """The plan's next step, given the last one's outcome; ``None`` once it is done."""
        try:
            if self.error is not None:
                return self.plan.throw(self.error)
            return self.plan.send(self.outcome)
        except StopIteration as done:
            self.result = done.value
            return None

    def settle(self, outcome: Any = None, error: MemMachineError | None = None) -> None:
        self.outcome, self.error = outcome, error


class Clients:
    """The SDK client(s) an adapter talks through: ``client`` for the blocking methods,
    ``async_client`` for the async ones (without it, async methods run the blocking client
    in a worker thread). ``owner`` names the adapter in errors."""

    def __init__(
        self, client: Client | None, async_client: AsyncClient | None, *, owner: str
    ) -> None:
        if client is None and async_client is None:
            raise TypeError(
                f"{owner} needs client= (a memmachine_sdk.Client), async_client=, or both"
            )
        self.client = client
        self.async_client = async_client
        self.owner = owner

    def run(self, plan: Plan[T]) -> T:
        """Carry ``plan`` out with the blocking client."""
        client = self.client
        if client is None:
            plan.close()
            raise TypeError(
                f"{self.owner} was given only an async_client: use its async methods, "
                "or pass client= too"
            )
        cursor = _Cursor(plan)
        while (step := cursor.next_step()) is not None:
            try:
                cursor.settle(step(client))
            except MemMachineError as exc:
                cursor.settle(error=exc)
        return cursor.result  # type: ignore[return-value]

    async def arun(self, plan: Plan[T]) -> T:
        """Carry ``plan`` out with the async client, or with the blocking one in a thread."""
        client = self.async_client
        if client is None:
            return await asyncio.to_thread(self.run, plan)
        cursor = _Cursor(plan)
        while (step := cursor.next_step()) is not None:
            try:
                pending = step(client)
                cursor.settle(await pending if inspect.isawaitable(pending) else pending)
            except MemMachineError as exc:
                cursor.settle(error=exc)
        return cursor.result  # type: ignore[return-value]


class SessionAdapter:
    """Base of the adapters bound to one memmachine session of one user: the ids, the
    clients, and plans for the session's working memory."""

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str,
        client: Client | None,
        async_client: AsyncClient | None,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self._clients = Clients(client, async_client, owner=type(self).__name__)

    def _read_working(self, last_n: int | None = None) -> Plan[m.WorkingMemoryOut]:
        """The session's working memory (its newest ``last_n`` messages, or all)."""
        session, user = self.session_id, self.user_id
        working: m.WorkingMemoryOut = yield lambda c: c.get_working(
            session, user_id=user, last_n=last_n
        )
        return working

    def _append_working(self, messages: Sequence[dict[str, Any]]) -> Plan[None]:
        if messages:
            session, user, batch = self.session_id, self.user_id, list(messages)
            yield lambda c: c.append_working(session, batch, user_id=user)

    def _clear_working(self) -> Plan[None]:
        session, user = self.session_id, self.user_id
        yield lambda c: c.delete_working(session, user_id=user)
