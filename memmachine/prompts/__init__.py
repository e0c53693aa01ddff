"""Prompts: functions that take typed inputs and return typed (pydantic) results from a
:class:`~memmachine.ports.LanguageModel`. See :mod:`memmachine.prompts.base`."""

from __future__ import annotations

from memmachine.prompts.base import Prompt, PromptMessage, Summary, summarise_messages

__all__ = ["Prompt", "PromptMessage", "Summary", "summarise_messages"]
