"""The ``strata`` command line and the Kafka admin client behind it.

A client of the Kafka protocol, kept apart from the server so that it works against any Kafka-compatible
broker and never drags the broker runtime into ``strata topics``: nothing under broker/, remote/, storage/,
protocol/ or config/ imports this package (tests/unit/test_cli_layering.py checks it); only ``strata serve``
imports the broker, and only when it runs.
"""
