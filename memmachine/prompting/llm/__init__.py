"""Prompts: functions that take typed inputs and return typed (pydantic) results from a
:class:`~memmachine.ports.LanguageModel`. See :mod:`memmachine.prompting.llm.base`."""

from __future__ import annotations

from memmachine.prompting.llm.base import Prompt, PromptMessage, Summary, summarise_messages
from memmachine.prompting.llm.distillation import (
    DistilledProcedure,
    KnownProcedure,
    distill_procedures,
)
from memmachine.prompting.llm.extraction import (
    CandidateFact,
    ConsolidationDecision,
    ExistingFact,
    decide_consolidation,
    extract_candidates,
)

__all__ = [
    "CandidateFact",
    "ConsolidationDecision",
    "DistilledProcedure",
    "ExistingFact",
    "KnownProcedure",
    "Prompt",
    "PromptMessage",
    "Summary",
    "decide_consolidation",
    "distill_procedures",
    "extract_candidates",
    "summarise_messages",
]
