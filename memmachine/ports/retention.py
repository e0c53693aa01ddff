"""Where the retention policies set through the admin route are kept across restarts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from memmachine.models import JsonDict, StoreHealth

__all__ = ["RetentionPolicyStore"]


@runtime_checkable
class RetentionPolicyStore(Protocol):
    """The retention policies of each tenant, as JSON objects (one
    :class:`~memmachine.config.RetentionPolicy` each, validated by whoever reads them).

    Policies belong to a tenant, not to a user, so these methods take a tenant instead of a
    Scope (as the :class:`~memmachine.ports.KeyStore` does).

    Contract:

    * ``put_policies(tenant, policies)`` replaces everything stored for ``tenant`` with
      ``policies``, in their order. An empty list is stored too: the tenant has stored
      "no policy", which is not the same as nothing stored.
    * ``all_policies()`` returns ``{tenant: policies}`` for every tenant stored (an empty
      list included), each list in the order it was put, tenants in id order.
    * What is stored survives a restart; several processes may use one database at once
      (the last ``put_policies`` of a tenant wins).
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...

    async def put_policies(self, tenant: str, policies: Sequence[JsonDict]) -> None: ...
    async def all_policies(self) -> dict[str, list[JsonDict]]: ...
