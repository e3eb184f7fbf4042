"""Strata pipeline layer: topics as a Spark data source (batch, streaming, sink) through PySpark's Python Data
Source API, plus example jobs (``strata.pipeline.jobs``) and the ``strata pipeline`` commands. See docs/spark.md.

    from strata.pipeline import get_spark
    spark = get_spark()                          # local[*], format "strata" registered
    df = (spark.read.format("strata").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

    df = read_table(spark, "events", {"iceberg.catalog.uri": "sqlite:////var/lib/strata/iceberg/catalog.db"})

Importing this package does not import pyspark; ``get_spark``/``register`` do.
"""

from __future__ import annotations

from typing import Any


def get_spark(*args: Any, **kwargs: Any) -> Any:
    from .session import get_spark as _get_spark

    return _get_spark(*args, **kwargs)


def register(spark: Any) -> None:
    from .session import register as _register

    _register(spark)


def read_table(spark: Any, topic: str, options: Any = None, **bounds: Any) -> Any:
    """A topic's Iceberg table read by Spark's own Parquet reader when it can, else ``format("strata-iceberg")``
    (strata.pipeline.table_native)."""
    from .table_native import read_table as _read_table

    return _read_table(spark, topic, options, **bounds)


__all__ = ["get_spark", "read_table", "register"]
