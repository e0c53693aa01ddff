"""Retention: how long memories are kept (``MEMMACHINE_RETENTION_*``, YAML ``retention:``).

A policy names a tenant and optionally an org, a project and an agent; the most specific
policy that matches a memory's scope applies to it (agent beats project beats org beats
tenant). "Keep the profile, drop transcripts after 90 days" is one line::

    retention:
      policies:
        - {tenant: acme, episodes_max_age_days: 90}
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic_settings import SettingsConfigDict

from memmachine.config.sources import Section
from memmachine.models import Identifier, ProjectScope, Scope

__all__ = ["RetentionPolicy", "RetentionSettings"]

DAY = 86_400
#: ``tenant/org/project`` (each id as :data:`~memmachine.models.ID_PATTERN`, checked when
#: the sweep builds its project scopes).
_PROJECT = r"^[^/]+/[^/]+/[^/]+$"


class RetentionPolicy(BaseModel):
    """How long one tenant (or one org / project / agent of it) keeps each kind of memory.
    An age left unset keeps that kind until it is deleted or expires on its own."""

    model_config = ConfigDict(extra="forbid")

    tenant: Identifier
    org_id: Identifier | None = None
    project_id: Identifier | None = None
    agent_id: Identifier | None = None
    #: Episodes (transcripts) older than this (by their timestamp) are removed.
    episodes_max_age_days: float | None = Field(default=None, gt=0)
    #: Facts not confirmed for this long (by ``updated_at``), per tag; ``"*"`` = any tag.
    facts_max_age_days: dict[str, float] = Field(default_factory=dict)
    #: Working-memory sessions not written for this long are removed.
    working_max_age_days: float | None = Field(default=None, gt=0)
    #: Done and dead background jobs (records and payloads) not updated for this long are
    #: removed; queued and running ones stay.
    jobs_max_age_days: float | None = Field(default=None, gt=0)

    def specificity(self, scope: Scope) -> int:
        """How closely this policy matches ``scope`` (-1: not at all)."""
        wanted = (self.tenant, self.org_id, self.project_id, self.agent_id)
        have = (scope.tenant, scope.org_id, scope.project_id, scope.agent_id)
        score = 0
        for mine, theirs in zip(wanted, have, strict=True):
            if mine is None:
                continue
            if mine != theirs:
                return -1
            score += 1
        return score

    def fact_max_age_seconds(self, tag: str) -> float | None:
        days = self.facts_max_age_days.get(tag, self.facts_max_age_days.get("*"))
        return None if days is None else days * DAY

    @property
    def episodes_max_age_seconds(self) -> float | None:
        days = self.episodes_max_age_days
        return None if days is None else days * DAY

    @property
    def working_max_age_seconds(self) -> float | None:
        days = self.working_max_age_days
        return None if days is None else days * DAY

    @property
    def jobs_max_age_seconds(self) -> float | None:
        days = self.jobs_max_age_days
        return None if days is None else days * DAY


class RetentionSettings(Section):
    """Expiry and retention: the background sweep and the policies it applies."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_RETENTION_", extra="ignore")
    yaml_section: ClassVar[str | None] = "retention"

    #: Seconds between two sweeps; an expired memory is gone from every store at most this
    #: long (plus one sweep's run time) after it expired. Each sweep reads every memory of
    #: the swept projects, so keep it well above a sweep's run time. 0 = no background sweep.
    sweep_interval_seconds: float = Field(default=900.0, ge=0)
    #: Memories examined per batch; the sweep yields to other work between batches.
    batch_size: int = Field(default=500, ge=1, le=10_000)
    #: Projects the sweep visits besides those its policies name ("tenant/org/project"); it
    #: visits every project a store holds data in anyway, so this is rarely needed.
    projects: list[Annotated[str, StringConstraints(pattern=_PROJECT)]] = Field(
        default_factory=lambda: ["default/default/default"]
    )
    policies: list[RetentionPolicy] = Field(default_factory=list)

    def policy_for(self, scope: Scope) -> RetentionPolicy | None:
        """The most specific policy matching ``scope``, or ``None``."""
        best: tuple[int, RetentionPolicy] | None = None
        for policy in self.policies:
            score = policy.specificity(scope)
            if score >= 0 and (best is None or score > best[0]):
                best = (score, policy)
        return None if best is None else best[1]

    def swept_projects(self) -> list[ProjectScope]:
        """The projects the sweep visits even when no store lists them: those listed and
        those a policy names."""
        seen: dict[tuple[str, str, str], None] = {}
        for entry in self.projects:
            tenant, org, project = entry.split("/")
            seen[(tenant, org, project)] = None
        for policy in self.policies:
            seen[(policy.tenant, policy.org_id or "default", policy.project_id or "default")] = None
        return [ProjectScope(tenant=t, org_id=o, project_id=p) for t, o, p in seen]
