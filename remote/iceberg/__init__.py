"""Iceberg topics: a topic translated into an Iceberg table (pyiceberg, pyarrow). See docs/iceberg.md."""
