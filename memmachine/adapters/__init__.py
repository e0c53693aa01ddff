"""Adapters: the drivers behind the ports, one folder per technology (``falkordb/``,
``neo4j/``, ``cypher/`` shared by both, ``sql/``, ``redis/``, ``onnx/``, ``openai/``,
``torch/``, ``file/``, ``indexed/``), each adapter ``<Tech><Port>`` in
``<tech>_<port>.py``. Adapters depend on ports, models and :mod:`memmachine.indexing` only.
Import the module you need; nothing happens here."""
