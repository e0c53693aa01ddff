"""OpenTelemetry: traces (the otel extra)."""
