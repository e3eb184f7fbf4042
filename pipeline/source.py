"""The ``strata`` data source for Spark 4's Python Data Source API (``pyspark.sql.datasource``).

    spark.dataSource.register(StrataDataSource)          # pipeline.register(spark) does it
    spark.read.format("strata").option("kafka.bootstrap.servers", "host:9092").option("subscribe", "t").load()
    spark.readStream.format("strata")...;  df.write.format("strata")...;  df.writeStream.format("strata")...

Planning (Metadata, ListOffsets, ``__remote_log_metadata``) runs on the driver; each Spark input partition carries
its offset range (and, in direct mode, the remote segments covering it) to an executor, which reads it. See
``strata.pipeline.options`` for the options and docs/spark.md for the whole story.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .client import TP, Cluster, DataLossError, data_loss_message
from .options import bool_option, parse_sink_options, parse_source_options
from .planning import OffsetRange, plan_batch, plan_ranges, resolve_starts
from .reading import read_range
from .sink import SinkCommit, check_sink_schema, produce_rows, task_txn

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark 4.x: no read limits, availableNow runs as a single batch
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class RangePartition(InputPartition):
    """One Spark input partition: an offset range of one topic partition (with its remote pieces)."""

    def __init__(self, index: int, rng: OffsetRange) -> None:
        super().__init__(index)
        self.range = rng

    def __repr__(self) -> str:
        return f"RangePartition({self.value}, {self.range.describe()})"


def _arrow_schema(schema: StructType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _read(opts: Any, schema: StructType, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, RangePartition):  # a plan with no ranges: Spark reads one empty partition
        return iter(())
    return read_range(opts, partition.range, _arrow_schema(schema))


# -- batch ----------------------------------------------------------------------------------------------------------
class StrataBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=False)
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(i, r) for i, r in enumerate(plan_batch(self.opts))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, self.schema, partition)


# -- streaming ------------------------------------------------------------------------------------------------------
def _to_json_offsets(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset JSON: {"topic": {"0": 23}} (sorted, so equal positions give equal JSON)."""
    out: dict[str, dict[str, int]] = {}
    for t, p in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def _from_json_offsets(doc: dict[str, Any] | None) -> dict[TP, int]:
    if not doc:
        return {}
    if isinstance(doc, str):
        doc = json.loads(doc)
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


def rate_limit(start: dict[TP, int], latest: dict[TP, int], max_offsets: int) -> dict[TP, int]:
    """At most ``max_offsets`` offsets in total, shared in proportion to each partition's backlog (the remainder
    goes to the largest backlogs first, so progress is made even when the limit is below the partition count)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    share = {tp: max_offsets * b // total for tp, b in backlog.items()}
    left = max_offsets - sum(share.values())
    for tp in sorted(backlog, key=lambda x: (-(backlog[x] - share[x]), x)):
        if left <= 0:
            break
        if share[tp] < backlog[tp]:
            share[tp] += 1
            left -= 1
    return {tp: start.get(tp, latest[tp]) + share[tp] for tp in latest}


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch source. Offsets are Spark-managed (the checkpoint's offset log holds {"topic": {"p": offset}});
    nothing is committed to the broker. Partitions and topics that appear later are read from their earliest
    offset."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=True)
        if self.opts.max_offsets_per_trigger and ReadMaxRows is None:
            import pyspark

            raise ValueError(
                f"maxOffsetsPerTrigger needs Spark 4.2 or later (admission control for Python data "
                f"sources); this is Spark {pyspark.__version__}: remove the option or upgrade"
            )
        self.schema = schema
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow: the end recorded at its start

    def _snapshot(self, cluster: Cluster) -> tuple[list[TP], dict[TP, Any]]:
        parts = cluster.topic_partitions(self.opts.subscription)
        tps = [(t, p) for t in sorted(parts) for p in parts[t]]
        return tps, cluster.offsets(tps)

    def initialOffset(self) -> dict:
        with Cluster(self.opts) as cluster:
            tps, bounds = self._snapshot(cluster)
            return _to_json_offsets(resolve_starts(cluster, self.opts, tps, bounds))

    def getDefaultReadLimit(self) -> Any:
        if ReadMaxRows is not None and self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        with Cluster(self.opts) as cluster:
            _tps, bounds = self._snapshot(cluster)
        self._target = {tp: b.latest for tp, b in bounds.items()}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        with Cluster(self.opts) as cluster:
            tps, bounds = self._snapshot(cluster)
        begin = _from_json_offsets(start)
        first: dict[TP, int] = {}
        latest: dict[TP, int] = {}
        for tp in tps:
            first[tp] = begin.get(tp, bounds[tp].earliest)  # a new partition starts at its earliest
            end = bounds[tp].latest
            if self._target is not None:  # availableNow: nothing past the target
                end = min(end, self._target.get(tp, first[tp]))
            latest[tp] = max(end, first[tp])
        for tp, off in begin.items():  # partitions that vanished keep their position
            if tp not in latest:
                first[tp] = latest[tp] = off
        max_rows = getattr(limit, "max_rows", None)
        if max_rows:
            latest = rate_limit(first, latest, int(max_rows))
        return _to_json_offsets(latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, finish = _from_json_offsets(start), _from_json_offsets(end)
        if not finish:
            return []
        with Cluster(self.opts) as cluster:
            tps = sorted(finish)
            known = set(self._known(cluster))
            bounds = cluster.offsets([tp for tp in tps if tp in known])
            starts, ends = {}, {}
            for tp in tps:
                b = bounds.get(tp)
                if b is None:
                    self._loss(f"{tp[0]}-{tp[1]} no longer exists")
                    continue
                s = begin.get(tp, b.earliest)
                e = finish[tp]
                if s < b.earliest:
                    self._loss(
                        f"{tp[0]}-{tp[1]}: offsets [{s}, {min(b.earliest, e)}) were deleted before they "
                        f"were read (the log now starts at {b.earliest})"
                    )
                    s = min(b.earliest, e) if e >= s else b.earliest
                if e < s:
                    self._loss(
                        f"{tp[0]}-{tp[1]}: the end offset {e} is before the start {s} (was the topic "
                        "deleted and recreated?)"
                    )
                    continue
                starts[tp], ends[tp] = s, e
            ranges = plan_ranges(cluster, self.opts, starts, ends)
        return [RangePartition(i, r) for i, r in enumerate(ranges)]

    def _known(self, cluster: Cluster) -> list[TP]:
        parts = cluster.topic_partitions(self.opts.subscription)
        return [(t, p) for t in parts for p in parts[t]]

    def _loss(self, what: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(data_loss_message(what))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing to commit to the broker."""


# -- writing --------------------------------------------------------------------------------------------------------
class StrataCommitMessage(WriterCommitMessage):
    def __init__(self, commit: SinkCommit) -> None:
        self.records = commit.records
        self.topics = commit.topics


class StrataBatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        self.fields = schema.fieldNames()
        check_sink_schema(self.fields, self.opts)
        # exactlyOnce: made on the driver, so every attempt of a task of this write has the same transactional id
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        txn = task_txn(self.opts, self.write_id) if self.opts.exactly_once else None
        return StrataCommitMessage(produce_rows(self.opts, self.fields, iterator, txn))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every record was acknowledged (acks=all) when its task finished."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records of finished tasks stay in the topic (Kafka writes cannot be rolled back without transactions)."""


class StrataStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        self.fields = schema.fieldNames()
        check_sink_schema(self.fields, self.opts)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        txn = task_txn(self.opts, None) if self.opts.exactly_once else None
        return StrataCommitMessage(produce_rows(self.opts, self.fields, iterator, txn))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Acknowledged when the tasks finished; Spark records the batch in its commit log."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: a retried micro-batch produces its records again (exactlyOnce: only the tasks whose
        transaction did not commit)."""


# -- the data source ------------------------------------------------------------------------------------------------
class StrataDataSource(DataSource):
    """``format("strata")``: topics of a Strata (or any Kafka-compatible) cluster as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "strata"

    def schema(self) -> StructType:
        raw = {str(k).lower(): str(v) for k, v in self.options.items()}
        return source_schema(bool_option("includeHeaders", raw.get("includeheaders"), False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StrataBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StrataStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return StrataBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StrataStreamWriter(self.options, schema)


__all__ = [
    "HEADERS_TYPE",
    "RangePartition",
    "StrataBatchReader",
    "StrataBatchWriter",
    "StrataDataSource",
    "StrataStreamReader",
    "StrataStreamWriter",
    "rate_limit",
    "source_schema",
]
