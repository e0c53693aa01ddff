"""One code path for the sync and the async side of an adapter.

Frameworks ask for both (LangGraph's ``batch``/``abatch``, LangChain's ``messages`` and
``aget_messages``...). An adapter writes each operation once, as a *plan*: a generator that
yields SDK calls (a function of the client) and receives their results, or has the SDK's
error thrown into it. :meth:`Clients.run` carries a plan out with a :class:`Client`,
:meth:`Clients.arun` with an :class:`AsyncClient` (or, given only a sync client, in a
worker thread); the two clients have the same methods, so the plan does not know which.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from memmachine_sdk._client import AsyncClient, Client
from memmachine_sdk.errors import MemMachineError

__all__ = ["Clients", "Plan", "Step"]

T = TypeVar("T")

#: One SDK call: given the client, the call (awaitable for an :class:`AsyncClient`).
Step = Callable[[Client | AsyncClient], Any]
#: An operation: yields steps, receives each step's result, returns the operation's result.
Plan = Generator[Step, Any, T]


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
        result: Any = None
        error: MemMachineError | None = None
        while True:
            try:
                step = plan.send(result) if error is None else plan.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                result, error = step(client), None
            except MemMachineError as exc:
                result, error = None, exc

    async def arun(self, plan: Plan[T]) -> T:
        """Carry ``plan`` out with the async client, or with the blocking one in a thread."""
        client = self.async_client
        if client is None:
            return await asyncio.to_thread(self.run, plan)
        result: Any = None
        error: MemMachineError | None = None
        while True:
            try:
                step = plan.send(result) if error is None else plan.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                pending = step(client)
                result = await pending if inspect.isawaitable(pending) else pending
                error = None
            except MemMachineError as exc:
                result, error = None, exc
