"""Measurements: accuracy metrics, requirements, the latency protocol."""
