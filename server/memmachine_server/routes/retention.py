"""Retention policies and the expiry sweep: /v1/admin/retention.

Policies start from the settings file (``retention.policies``); ``PUT`` replaces the calling
tenant's (all of them with ``MEMMACHINE_ADMIN_KEY``) and keeps them in the profile store's
database, so they outlive a restart and override the settings file's for those tenants;
the next sweep applies them to data already stored. Running a sweep on demand and reading its
counts (which span every tenant) is for ``MEMMACHINE_ADMIN_KEY`` only.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from memmachine.config import RetentionPolicy
from memmachine.errors import PermissionDeniedError
from memmachine.memory.retention import RetentionReport
from memmachine_sdk import models as wire
from memmachine_server.keyring import Principal
from memmachine_server.openapi import AUTH_ERRORS, errors
from memmachine_server.scope import AdminPrincipal
from memmachine_server.state import manager_of

__all__ = ["router"]

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=AUTH_ERRORS)


def _answer(request: Request, principal: Principal) -> wire.RetentionResponse:
    sweep = manager_of(request).retention
    policies = [
        wire.RetentionPolicyOut.model_validate(policy.model_dump())
        for policy in sweep.settings.policies
        if principal.all_tenants or policy.tenant == principal.tenant
    ]
    last = sweep.last if principal.all_tenants else None
    return wire.RetentionResponse(
        sweep_interval_seconds=sweep.settings.sweep_interval_seconds,
        policies=policies,
        last_sweep=None if last is None else _report(last),
    )


def _report(report: RetentionReport) -> wire.RetentionReportOut:
    return wire.RetentionReportOut.model_validate(report.model_dump())


@router.get("/retention", response_model=wire.RetentionResponse, responses=errors(403))
async def get_retention(request: Request, principal: AdminPrincipal) -> wire.RetentionResponse:
    """The retention policies in force (the caller's tenant's) and the last sweep."""
    return _answer(request, principal)


@router.put("/retention", response_model=wire.RetentionResponse, responses=errors(403, 413, 422))
async def put_retention(
    body: wire.RetentionPoliciesRequest, request: Request, principal: AdminPrincipal
) -> wire.RetentionResponse:
    """Replace the caller's tenant's retention policies (every tenant's with the admin key);
    the next sweep applies them, to old data too."""
    for index, policy in enumerate(body.policies):
        if not principal.all_tenants and policy.tenant != principal.tenant:
            raise PermissionDeniedError(
                f"policies.{index}: this admin key manages tenant {principal.tenant!r} only"
            )
    new = [RetentionPolicy.model_validate(policy.model_dump()) for policy in body.policies]
    tenant = None if principal.all_tenants else principal.tenant
    await manager_of(request).retention.replace_policies(tenant, new)
    return _answer(request, principal)


@router.post("/retention/sweep", response_model=wire.RetentionReportOut, responses=errors(403))
async def run_retention_sweep(
    request: Request, principal: AdminPrincipal
) -> wire.RetentionReportOut:
    """Run the expiry and retention sweep now (``MEMMACHINE_ADMIN_KEY`` only); its counts."""
    if not principal.all_tenants:
        raise PermissionDeniedError("only MEMMACHINE_ADMIN_KEY may run the retention sweep")
    return _report(await manager_of(request).retention.run())
