"""Prometheus: the metrics registry behind /metrics."""
