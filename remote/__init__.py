"""Strata remote layer: KIP-405 tiered storage, RSM, RLMM, RLM (see docs/architecture.md)."""
