"""The memory services: one per kind of memory, each owning its store's writes (through the
write gate, :mod:`memmachine.safety.gate`), reads and forgetting.

* :mod:`~memmachine.memory.episodic`: episodes, embedded when written
  (:mod:`~memmachine.memory.embedding`) and found by :mod:`memmachine.retrieval`;
* :mod:`~memmachine.memory.profile`: facts, their confidence
  (:mod:`~memmachine.memory.confidence`), history and consolidation's apply step
  (:mod:`~memmachine.memory.consolidation`);
* :mod:`~memmachine.memory.working`: sessions (messages, state, summary) and when to
  compact them; typed agent state (:mod:`~memmachine.memory.agent_state`) can live in
  them (:mod:`~memmachine.memory.working_state`);
* :mod:`~memmachine.memory.custom` and :mod:`~memmachine.memory.custom_registry`: custom
  memory types.

Procedural memory, the next kind, is a fourth service module here of the same shape: a
class taking its store port and the shared :class:`~memmachine.safety.gate.WriteGate`,
passing every write through the gate, joining :mod:`~memmachine.memory.forgetting`, and
exposed by the manager under its public names. Services depend on ports, the gate,
retrieval and the pipeline, never on one another's internals; what spans several
(adding messages, deleting an episode, forgetting) is in the manager or
:mod:`~memmachine.memory.forgetting`.
"""
