"""Strata broker layer: network, KafkaApis, replication, cluster, groups (see docs/architecture.md)."""
