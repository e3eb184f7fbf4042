"""Example Spark jobs over Strata topics, runnable as modules (``python -m strata.pipeline.jobs.export ...``) or through
``strata pipeline <job>``:

* ``export``    -- a topic's full history (tiered + local) to Parquet (batch).
* ``aggregate`` -- a streaming per-key aggregation (records, bytes, first/last timestamp) kept in a Parquet table.
* ``transform`` -- a streaming topic-to-topic transform (a SQL expression over each record) through the sink.

Each job is a plain function taking a SparkSession, so notebooks and tests call them directly.
"""
