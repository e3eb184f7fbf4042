"""Strata protocol layer: sans-IO Kafka wire formats (see docs/architecture.md)."""
