"""Adapters: the drivers behind the ports, one folder per technology (``falkordb/``,
``neo4j/``, ``cypher/`` shared by both, ``sql/``, ``redis/``, ``onnx/``, ``openai/``,
``torch/``, ``file/``, ``indexed/``, ``observed/``, ``prometheus/``, ``opentelemetry/``,
``inprocess/``), each adapter ``<Tech><Port>`` in ``<tech>_<port>.py``. Adapters depend on
ports, models, :mod:`memmachine.indexing` and :mod:`memmachine.telemetry` only.
Import the module you need; nothing happens here."""
