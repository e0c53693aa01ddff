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
  memory types;
* :mod:`~memmachine.memory.procedural`: an application's procedures (not a user's),
  written or distilled from successful sessions, shared by its users.

Each service takes its store port and the shared :class:`~memmachine.safety.gate.WriteGate`,
passes every write through the gate, joins :mod:`~memmachine.memory.forgetting`, and is
exposed by the manager. Services depend on ports, the gate, retrieval and the pipeline,
never on one another's internals; what spans several (adding messages, deleting an
episode, forgetting) is in the manager or :mod:`~memmachine.memory.forgetting`.
"""
