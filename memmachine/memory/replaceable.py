"""The parts of a running memory that may be replaced while it serves: the embedder, the
reranker, the retrieval settings and the write path's safety settings. The next call uses
the new one."""

from __future__ import annotations

from memmachine.config import RetrievalSettings, SafetySettings
from memmachine.memory.episodic import EpisodicService
from memmachine.memory.procedural import ProceduralMemory
from memmachine.memory.profile import ProfileService
from memmachine.ports import Embedder, Reranker
from memmachine.safety.gate import WriteGate

__all__ = ["ReplaceableParts"]


class ReplaceableParts:
    """Properties over the services that hold each replaceable part (a base of
    :class:`~memmachine.manager.MemoryManager`)."""

    episodic_service: EpisodicService
    profile_service: ProfileService
    procedural_service: ProceduralMemory
    gate: WriteGate

    @property
    def embedder(self) -> Embedder | None:
        return self.episodic_service.embedder

    @embedder.setter
    def embedder(self, value: Embedder | None) -> None:
        self.episodic_service.embedder = self.profile_service.embedder = value
        self.procedural_service.embedder = value

    @property
    def reranker(self) -> Reranker | None:
        return self.episodic_service.reranker

    @reranker.setter
    def reranker(self, value: Reranker | None) -> None:
        self.episodic_service.reranker = value

    @property
    def retrieval(self) -> RetrievalSettings:
        return self.episodic_service.retrieval

    @retrieval.setter
    def retrieval(self, value: RetrievalSettings) -> None:
        self.episodic_service.retrieval = value

    @property
    def safety(self) -> SafetySettings:
        """Write-path safety: PII redaction and the injection guard of the write gate."""
        return self.gate.safety

    @safety.setter
    def safety(self, value: SafetySettings) -> None:
        self.gate.safety = value
