"""Iceberg topics: a topic's committed records as an Iceberg table (docs/iceberg.md).

`schema` (columns and partition spec), `records` (READ_COMMITTED decoding of stored batches), `convert` (the
`Converter` hook; key_value here), `catalog` (pyiceberg SQL/REST catalogs, table creation), `offsets` (the
exactly-once bookkeeping in snapshot summaries), `commit` (Parquet files + one append commit), `translator` (the
per-partition loop). The broker wiring (leadership, configs, metrics, retention hold) lives in broker/iceberg.py;
nothing here imports broker/.
"""
