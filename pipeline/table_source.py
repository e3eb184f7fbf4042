"""``format("strata-iceberg")``: a topic's Iceberg table (``iceberg.enable=true``) as a Spark batch source, with the
topic's records after the table's committed offsets ("table + tail") in the same DataFrame.

    spark.read.format("strata-iceberg").option("subscribe", "events")
         .option("iceberg.catalog.uri", "sqlite:////var/lib/strata/iceberg/catalog.db")   # the broker's catalog
         .option("kafka.bootstrap.servers", "broker:9092")      # optional: + the records not translated yet
         .load()

A format of its own rather than an option of ``strata``: its schema is the table's (value_json tables have the
value's columns), it needs a catalog rather than a broker, and it reads files rather than offset ranges; the tail
still goes through the ``strata`` source's planning and readers (either ``read.mode``). The driver plans with
pyiceberg (one Spark partition per data file of the current snapshot, files pruned by the pushed filters on
``partition`` and ``offset``); executors read their file with pyarrow through pyiceberg's ``ArrowScan``, which
applies the table's schema evolution and delete files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .options import SourceOptions
from .planning import OffsetRange
from .reading import ROWS_PER_BATCH, read_range
from .source import _arrow_schema
from .table_planning import TableOptions, load_table, parse_table_options, plan


@dataclass(frozen=True)
class FileScanContext:
    """What every file of one plan needs on an executor: the table metadata file of the planned snapshot, the
    catalog's FileIO properties (credentials: not printed), the snapshot's schema and the pushed row filter."""

    metadata_location: str
    io_props: dict[str, str] = field(repr=False)
    schema_id: int = 0
    row_filter: Any = None


class FilePartition(InputPartition):
    """One data file of the table (a pyiceberg FileScanTask)."""

    def __init__(self, index: int, task: Any, ctx: FileScanContext) -> None:
        super().__init__(index)
        self.task = task
        self.ctx = ctx

    def __repr__(self) -> str:
        return f"FilePartition({self.value}, {self.task.file.file_path})"


class TailPartition(InputPartition):
    """One offset range of the topic after the table's committed offset, read as the ``strata`` source does."""

    def __init__(self, index: int, rng: OffsetRange, opts: SourceOptions) -> None:
        super().__init__(index)
        self.range = rng
        self.opts = opts

    def __repr__(self) -> str:
        return f"TailPartition({self.value}, {self.range.describe()})"


def table_spark_schema(table: Any) -> StructType:
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema_to_pyarrow(table.schema(), include_field_ids=False))


_METADATA: dict[str, Any] = {}  # metadata location -> TableMetadata, per worker process (immutable files)


def _metadata(ctx: FileScanContext, io: Any) -> Any:
    from pyiceberg.serializers import FromInputFile

    md = _METADATA.get(ctx.metadata_location)
    if md is None:
        if len(_METADATA) >= 16:
            _METADATA.clear()
        md = _METADATA[ctx.metadata_location] = FromInputFile.table_metadata(io.new_input(ctx.metadata_location))
    return md


def read_file(ctx: FileScanContext, task: Any, target: Any) -> Iterator[Any]:
    """The rows of one data file, as record batches of Spark's Arrow schema (``target``)."""
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import ArrowScan

    io = load_file_io(properties=ctx.io_props, location=ctx.metadata_location)
    md = _metadata(ctx, io)
    schema = next(s for s in md.schemas if s.schema_id == ctx.schema_id)
    scan = ArrowScan(md, io, schema, ctx.row_filter)
    for rb in scan.to_record_batches([task]):
        out = rb.select(target.names).cast(target)
        for at in range(0, out.num_rows, ROWS_PER_BATCH):  # batches of the strata source's size for the JVM side
            yield out.slice(at, ROWS_PER_BATCH)


class TableReader(DataSourceReader):
    def __init__(self, opts: TableOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.filters: list[Any] = []

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        """Partition and offset filters prune files and tail ranges; Spark still evaluates every filter."""
        self.filters = list(filters)
        yield from filters

    def partitions(self) -> list[InputPartition]:
        """Made after ``read`` was shipped to the executors: each partition carries what reading it needs."""
        p = plan(self.opts, self.filters)
        out: list[InputPartition] = []
        if p.tasks:
            ctx = FileScanContext(p.metadata_location, p.io_props, p.schema_id, p.row_filter)
            out = [FilePartition(i, t, ctx) for i, t in enumerate(p.tasks)]
        if p.tail_options is not None:
            n = len(out)
            out += [TailPartition(n + i, r, p.tail_options) for i, r in enumerate(p.tail)]
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        target = _arrow_schema(self.schema)
        if isinstance(partition, FilePartition):
            return read_file(partition.ctx, partition.task, target)
        if isinstance(partition, TailPartition):
            return read_range(partition.opts, partition.range, target)
        return iter(())  # a plan with nothing to read: Spark reads one empty partition


class StrataIcebergDataSource(DataSource):
    """``format("strata-iceberg")``: a topic's Iceberg table (+ the topic's tail)."""

    @classmethod
    def name(cls) -> str:
        return "strata-iceberg"

    def schema(self) -> StructType:
        return table_spark_schema(load_table(parse_table_options(self.options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TableReader(parse_table_options(self.options), schema)


__all__ = [
    "FilePartition",
    "FileScanContext",
    "StrataIcebergDataSource",
    "TailPartition",
    "TableReader",
    "read_file",
    "table_spark_schema",
]
