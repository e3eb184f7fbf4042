"""``read_table``: a topic's Iceberg table read by Spark's own Parquet reader in the JVM, planned with pyiceberg.

Every row of a Python data source crosses from the Python worker into the JVM as Arrow batches, and that hand-over
bounds ``format("strata-iceberg")`` (docs/spark.md "Performance"). Spark's Parquet reader runs in the JVM, prunes
columns and pays none of it. So the driver plans exactly as the data source does (same catalog options, same
partition/offset pruning) and hands the current snapshot's data file paths to ``spark.read.schema(<the table's
schema>).parquet``, when that reads the same rows:

* no delete files in the planned files (Spark's Parquet reader would not apply them);
* no column renamed or retyped in the table's schema history (Parquet columns are matched by name, not field id);
  a column added later reads as null from older files;
* the JVM can open the paths: local files always, ``s3://``/``s3a://`` only when the session's Hadoop
  configuration has an S3A file system (``s3://`` is given to Hadoop as ``s3a://``);
* the table alone (no tail: with ``kafka.bootstrap.servers`` set, pass ``tail="false"`` or get the data source).

Otherwise it returns ``spark.read.format("strata-iceberg")`` with the same options and logs why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from .table_planning import TablePlan, load_table, parse_table_options, plan

log = logging.getLogger(__name__)

LOCAL_SCHEMES = ("file:", "/")
S3_SCHEMES = ("s3://", "s3a://", "s3n://")


def _filters(partitions: Iterable[int] | None, offsets: tuple[int | None, int | None]) -> list[Any]:
    """The Spark filters the data source would be pushed for these bounds (offsets [lo, hi)), one column path
    form for both table kinds (fixed up by ``_column_path``)."""
    from pyspark.sql import datasource as ds

    out: list[Any] = []
    if partitions is not None:
        out.append(ds.In(("partition",), tuple(sorted(set(partitions)))))
    lo, hi = offsets
    if lo is not None:
        out.append(ds.GreaterThanOrEqual(("offset",), lo))
    if hi is not None:
        out.append(ds.LessThan(("offset",), hi))
    return out


def _kafka_columns(key_value: bool) -> tuple[str, str]:
    """The partition and offset columns: top level in key_value tables, under ``kafka`` in value_json tables."""
    return ("partition", "offset") if key_value else ("kafka.partition", "kafka.offset")


def s3a_available(spark: Any) -> bool:
    """Whether the session's JVM has a Hadoop file system for ``s3a://`` (hadoop-aws on the class path, or
    ``fs.s3a.impl`` set): asking Hadoop for the scheme's class is cheap and opens no connection."""
    try:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("s3a", conf)
    except Exception:  # noqa: BLE001 - no S3A class, or Spark Connect (no JVM in this process)
        return False
    return True


def jvm_path(path: str, s3a: bool) -> str | None:
    """``path`` as Hadoop opens it, or None when this session's JVM cannot."""
    if path.startswith(LOCAL_SCHEMES):
        return path
    if path.startswith(S3_SCHEMES):
        return "s3a://" + path.split("://", 1)[1] if s3a else None
    return None


def _renamed_or_retyped(table: Any) -> bool:
    """Whether a field id ever had another name or type than in the current schema (Parquet files would then be
    read by the wrong name, or fail to merge)."""
    current = {f.field_id: (f.name, f.field_type) for f in table.schema().fields}
    for schema in table.schemas().values():
        for f in schema.fields:
            if f.field_id in current and current[f.field_id] != (f.name, f.field_type):
                return True
    return False


def native_paths(spark: Any, table: Any, p: TablePlan) -> tuple[list[str] | None, str]:
    """The JVM paths of the plan's files, or (None, why not)."""
    if any(t.delete_files for t in p.tasks):
        return None, "the snapshot has delete files"
    if any(not t.file.file_path.endswith(".parquet") for t in p.tasks):
        return None, "a data file is not Parquet"
    if _renamed_or_retyped(table):
        return None, "a column was renamed or retyped"
    s3a = any(t.file.file_path.startswith(S3_SCHEMES) for t in p.tasks) and s3a_available(spark)
    paths = [jvm_path(t.file.file_path, s3a) for t in p.tasks]
    if any(x is None for x in paths):
        return None, "the JVM has no file system for the table's paths (configure Hadoop S3A for s3:// tables)"
    return [x for x in paths if x is not None], ""


def read_table(
    spark: Any,
    topic: str,
    options: Mapping[str, str] | None = None,
    *,
    partitions: Iterable[int] | None = None,
    offsets: tuple[int | None, int | None] = (None, None),
) -> Any:
    """A DataFrame of ``topic``'s Iceberg table, read by Spark's Parquet reader when it can (module docstring),
    else by ``format("strata-iceberg")``. ``options`` are the data source's (``iceberg.catalog.*``); ``partitions``
    and ``offsets`` ([lo, hi)) prune files as its pushed filters do, and are applied to the rows."""
    from pyspark.sql import functions as F

    from .table_source import table_spark_schema

    raw = {**(options or {}), "subscribe": topic}
    opts = parse_table_options(raw)
    filters = _filters(partitions, offsets)
    table = load_table(opts)
    key_value = all(c in table.schema().column_names for c in ("partition", "offset"))
    if not key_value:  # value_json tables: the same bounds on kafka.partition / kafka.offset
        filters = [type(f)(("kafka", *f.attribute), f.value) for f in filters]
    schema = table_spark_schema(table)
    why = "the tail is read from the topic (pass tail=false for the table alone)" if opts.tail else ""
    paths: list[str] | None = None
    if not why:
        p = plan(opts, filters, table)  # the snapshot whose schema was read above
        paths, why = native_paths(spark, table, p)
    if paths is None:
        log.info("read_table %s: strata-iceberg data source (%s)", topic, why)
        df = spark.read.format("strata-iceberg").options(**raw).load()
    elif not paths:
        df = spark.createDataFrame([], schema)
    else:
        log.info("read_table %s: Spark's Parquet reader, %d files", topic, len(paths))
        # the table's schema given, not inferred: no job reading every footer, and a column a file lacks (added
        # after it was written) reads as null, by name, as mergeSchema would
        df = spark.read.schema(schema).parquet(*paths)
    part_col, off_col = _kafka_columns(key_value)
    if partitions is not None:
        df = df.where(F.col(part_col).isin(sorted(set(partitions))))
    if offsets[0] is not None:
        df = df.where(F.col(off_col) >= offsets[0])
    if offsets[1] is not None:
        df = df.where(F.col(off_col) < offsets[1])
    return df


__all__ = ["jvm_path", "native_paths", "read_table", "s3a_available"]
