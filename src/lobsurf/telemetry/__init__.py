"""Telemetry beyond metrics.jsonl: a TensorBoard mirror of the metrics records."""
