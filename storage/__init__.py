"""Strata storage layer: partition logs in Kafka's on-disk formats (see docs/architecture.md)."""
