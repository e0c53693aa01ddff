"""Wrappers that observe any adapter of a port for telemetry: durations, errors, spans."""
