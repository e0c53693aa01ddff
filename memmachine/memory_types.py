"""Custom memory types, the public names plugin authors import: subclass
:class:`CustomMemoryType` and store through the :class:`RecordSpace` each call gets (see
:mod:`memmachine.memory.custom`); :class:`MemoryTypeRegistry` finds and serves them
(:mod:`memmachine.memory.custom_registry`)."""

from __future__ import annotations

from memmachine.memory.custom import (
    ENTRY_POINT_GROUP,
    PARTITION_FIELDS,
    RESERVED_NAMES,
    SETTING,
    TYPE_NAME_PATTERN,
    CustomMemoryType,
    CustomRecord,
    MemoryTypeInfo,
    RecordSpace,
    TypeSource,
)
from memmachine.memory.custom_registry import (
    MemoryTypeRegistry,
    discover_memory_types,
    load_configured_types,
    load_entry_point_types,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "PARTITION_FIELDS",
    "RESERVED_NAMES",
    "SETTING",
    "TYPE_NAME_PATTERN",
    "CustomMemoryType",
    "CustomRecord",
    "MemoryTypeInfo",
    "MemoryTypeRegistry",
    "RecordSpace",
    "TypeSource",
    "discover_memory_types",
    "load_configured_types",
    "load_entry_point_types",
]
