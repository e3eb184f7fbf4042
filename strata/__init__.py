"""Strata: a Kafka-wire-compatible broker with KIP-405 tiered storage.

The subpackages live in the repository's top-level folders (broker/, protocol/, storage/, remote/, config/,
pipeline/); in a checkout, ``strata/<name>`` links to ``../<name>`` so that one import path, ``strata.<name>``,
serves the installed wheel, the source tree, the tests and the type checker alike. See docs/architecture.md.
"""
