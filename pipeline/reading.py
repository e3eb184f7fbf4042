"""Executor-side reads of one planned ``OffsetRange`` into Arrow record batches of Spark's Kafka schema.

* Broker pieces: confluent-kafka consumer, assigned (no group membership), from ``start`` until ``end``.
* Remote pieces (``read.mode=direct``): the executor builds the RemoteStorageManager the options describe (the same
  classes the broker uses: ``strata.remote.s3``, ``strata.remote.local_tiered``), finds the start position in the
  segment's offset index, streams the ``.log`` in fixed-size chunks into buffers the worker process reuses (the next
  chunks are fetched while the current one is decoded) and decodes the batches with ``strata.pipeline.decode`` (CRC
  checked, decompressed, control batches skipped); a batch cut by a chunk's end is completed from the next chunk.

Data loss (offsets deleted between planning and reading) raises DataLossError, or with failOnDataLoss=false skips
what is gone.
"""

from __future__ import annotations

import asyncio
import atexit
import bisect
import contextlib
import struct
import threading
import uuid
from collections import deque
from collections.abc import Generator, Iterator
from typing import Any

from strata.protocol.records import HEADER_SIZE, LOG_OVERHEAD, read_offset_and_length

from .client import DataLossError, consume_range, data_loss_message, log_start_offset
from .decode import Columns, CorruptSegmentError, Decoded, decode_batches
from .options import SourceOptions
from .planning import OffsetRange, Piece

ROWS_PER_BATCH = 8192
_INDEX_ENTRY = struct.Struct(">ii")


# -- Arrow --------------------------------------------------------------------------------------------------------
class ArrowEmitter:
    """Turns Columns of one topic partition into ``pyarrow.RecordBatch``es with exactly Spark's Arrow schema."""

    def __init__(self, arrow_schema: Any, topic: str, partition: int) -> None:
        self.schema = arrow_schema
        self.names = arrow_schema.names
        self.topic = topic
        self.partition = partition
        self.columns = Columns(with_headers="headers" in self.names)
        self._constants: dict[str, Any] = {}

    def full(self) -> bool:
        return len(self.columns) >= ROWS_PER_BATCH

    def take(self) -> Any:
        """The rows the Columns hold, as one record batch; the Columns are emptied."""
        c = self.columns
        rb = self._record_batch(len(c), c.keys, c.values, c.offsets, c.timestamps, c.timestamp_types, c.headers)
        c.clear()
        return rb

    def batches(self, d: Decoded) -> Iterator[Any]:
        """Record batches of at most ROWS_PER_BATCH rows (zero-copy slices) of records decoded in bulk; rows
        the Columns still hold go first, so the order of offsets is kept."""
        if len(self.columns):
            yield self.take()
        n = len(d)
        rb = self._record_batch(
            n, d.keys, d.values, d.offsets, d.timestamps, d.timestamp_types, d.headers or [None] * n
        )
        for at in range(0, n, ROWS_PER_BATCH):
            yield rb.slice(at, ROWS_PER_BATCH)

    def _record_batch(
        self, n: int, keys: Any, values: Any, offsets: Any, timestamps_ms: Any, timestamp_types: Any, headers: Any
    ) -> Any:
        """One batch in the schema's column order. Keys and values: Arrow arrays (bulk decoding) or lists of bytes
        (records consumed one by one); the other columns: lists or NumPy arrays."""
        import pyarrow as pa
        import pyarrow.compute as pc

        arrays = []
        for name in self.names:
            t = self.schema.field(name).type
            if name in ("key", "value"):
                col = keys if name == "key" else values
                arrays.append(col if isinstance(col, pa.Array) else pa.array(col, t))
            elif name in ("topic", "partition"):
                arrays.append(self._constant(name, t, n))
            elif name == "offset":
                arrays.append(pa.array(offsets, t))
            elif name == "timestamp":
                millis = pa.array(timestamps_ms, pa.int64())
                arrays.append(pc.multiply(millis, 1000).view(t) if n else pa.array([], t))
            elif name == "timestampType":
                arrays.append(pa.array(timestamp_types, t))
            elif name == "headers":
                arrays.append(
                    pa.array([None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers], t)
                )
            else:
                raise ValueError(f"column {name!r} is not part of the strata source schema")
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _constant(self, name: str, t: Any, n: int) -> Any:
        """The topic or partition column: one array of the largest length asked for so far, sliced."""
        import pyarrow as pa

        have = self._constants.get(name)
        if have is None or len(have) < n:
            have = self._constants[name] = pa.array([self.topic if name == "topic" else self.partition] * n, t)
        return have.slice(0, n)


# -- broker pieces ------------------------------------------------------------------------------------------------
_TS_TYPES = {1: 0, 2: 1}  # confluent TIMESTAMP_CREATE_TIME/LOG_APPEND_TIME -> Kafka ids; 0 (n/a) -> -1


def read_broker_piece(opts: SourceOptions, r: OffsetRange, piece: Piece, out: ArrowEmitter) -> Iterator[Any]:
    conf = opts.consumer_conf(f"strata-spark-executor-{uuid.uuid4().hex[:12]}")
    start = piece.start
    cols = out.columns
    with_headers = cols.with_headers
    while start < piece.end:
        try:
            for msgs in consume_range(conf, r.topic, r.partition, start, piece.end, opts.poll_timeout_s):
                for m in msgs:
                    ts_type, ts = m.timestamp()
                    cols.append(
                        m.key(),
                        m.value(),
                        m.offset(),
                        ts,
                        _TS_TYPES.get(ts_type, -1),
                        m.headers() if with_headers else None,
                    )
                    start = m.offset() + 1
                    if len(cols) >= ROWS_PER_BATCH:
                        yield out.take()
            return
        except DataLossError:
            # Out of range: retention deleted offsets before (or while) they were read. Asked only now, so a read
            # that starts in range costs one consumer, not two. failOnDataLoss=false goes on from the new log
            # start, as Spark's Kafka source does; the records still there are read.
            low = log_start_offset(conf, r.topic, r.partition)
            if low <= start:  # out of range, yet not deleted below us (e.g. past a truncated end)
                if opts.fail_on_data_loss:
                    raise
                return
            if opts.fail_on_data_loss:
                raise DataLossError(
                    data_loss_message(
                        f"{r.topic}-{r.partition}: offsets [{start}, {min(low, piece.end)}) were deleted before they "
                        f"could be read (the log now starts at {low})"
                    )
                ) from None
            start = low


# -- remote pieces ------------------------------------------------------------------------------------------------
# A task reads each byte of a segment once, in order, with its own read-ahead (direct.fetchConcurrency): the chunk
# cache the broker's options configure would only copy every chunk into memory (and prefetch what the task fetches
# anyway), so executors read exact byte ranges instead: no memory tier, no disk tier (the RSM then has no cache).
_NO_CHUNK_CACHE = {"fetch.chunk.cache.size": "0"}
_DISK_CACHE_KEY = "fetch.chunk.cache.path"


class RemoteStorage:
    """A RemoteStorageManager driven from synchronous code: its own event loop on a daemon thread. One per worker
    process and configuration (``shared_storage``), since building it is not cheap: an S3 client parses botocore's
    service model and builds a TLS context, about 0.1 s of CPU, paid again by every task otherwise."""

    def __init__(self, opts: SourceOptions) -> None:
        from strata.remote.rsm import create_remote_storage_manager

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="strata-rsm-loop", daemon=True)
        self._thread.start()
        config = {k: v for k, v in opts.rsm_config.items() if k != _DISK_CACHE_KEY}
        self.rsm = create_remote_storage_manager(opts.rsm_class, {**config, **_NO_CHUNK_CACHE})

    def submit(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Any) -> Any:
        return self.submit(coro).result()

    def close(self) -> None:
        try:
            self.call(self.rsm.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()


_shared: dict[tuple[str, tuple[tuple[str, str], ...]], RemoteStorage] = {}
_shared_lock = threading.Lock()


def shared_storage(opts: SourceOptions) -> RemoteStorage:
    """The worker process's RemoteStorage for these options, built on first use. Spark reuses Python workers
    across tasks (spark.python.worker.reuse, on by default), so the S3 client and its connections outlive a task;
    it is closed when the worker exits."""
    key = (opts.rsm_class, tuple(sorted((k, str(v)) for k, v in opts.rsm_config.items())))
    with _shared_lock:
        storage = _shared.get(key)
        if storage is None:
            if not _shared:
                atexit.register(_close_shared)
            storage = _shared[key] = RemoteStorage(opts)
        return storage


def _close_shared() -> None:
    with _shared_lock:
        storages = list(_shared.values())
        _shared.clear()
    for storage in storages:
        with contextlib.suppress(Exception):  # the process is exiting; nothing is left to read
            storage.close()


def index_positions(index: bytes, base_offset: int) -> tuple[list[int], list[int]]:
    """A Kafka offset index (entries of relative offset int32, position int32) as absolute offsets, positions."""
    n = len(index) // _INDEX_ENTRY.size
    offsets: list[int] = []
    positions: list[int] = []
    for rel, pos in _INDEX_ENTRY.iter_unpack(index[: n * _INDEX_ENTRY.size]):
        if offsets and (rel + base_offset <= offsets[-1] or pos <= positions[-1]):
            break  # zero-filled preallocated tail
        offsets.append(base_offset + rel)
        positions.append(pos)
    return offsets, positions


def byte_range(offsets: list[int], positions: list[int], lo: int, hi: int) -> tuple[int, int | None]:
    """[first, last] byte positions (last inclusive, None = to the end) covering offsets [lo, hi).

    An index entry maps the largest offset of an append to the position where that append starts, so reading from
    the greatest entry <= lo finds lo, and everything from the entry after the first one >= hi is past hi."""
    i = bisect.bisect_right(offsets, lo) - 1
    first = positions[i] if i >= 0 else 0
    j = bisect.bisect_left(offsets, hi)
    last = positions[j + 1] - 1 if j + 1 < len(positions) else None
    return first, last


class BufferPool:
    """Fixed-size buffers a worker process reuses for the ranged reads of remote segments. A fresh buffer per read
    costs more CPU in page faults than the copy into it (the kernel maps and zeroes every page of a large
    allocation, and takes it back when it is freed); reused, the pages stay mapped. Keeps at most ``keep_bytes``
    of free buffers."""

    def __init__(self, keep_bytes: int = 128 << 20) -> None:
        self.keep_bytes = keep_bytes
        self._free: dict[int, list[bytearray]] = {}
        self._free_bytes = 0
        self._lock = threading.Lock()

    def get(self, size: int) -> bytearray:
        with self._lock:
            free = self._free.get(size)
            if free:
                self._free_bytes -= size
                return free.pop()
        return bytearray(size)

    def put(self, buf: bytearray) -> None:
        """Keep ``buf`` for a later ``get``; buffers of other sizes give way when the pool is full (a chunk size
        in use replaces one no longer asked for)."""
        size = len(buf)
        with self._lock:
            for other in [s for s in self._free if s != size]:
                free = self._free[other]
                while free and self._free_bytes + size > self.keep_bytes:
                    free.pop()
                    self._free_bytes -= other
            if self._free_bytes + size <= self.keep_bytes:
                self._free.setdefault(size, []).append(buf)
                self._free_bytes += size


_buffers = BufferPool()


def complete_straddler(carry: bytearray, view: memoryview) -> tuple[memoryview, bool]:
    """Extends ``carry``, the start of a batch the previous chunk's end cut, in place from the head of the next
    chunk ``view``: returns the rest of ``view`` and whether ``carry`` now holds the whole batch. Only the cut batch
    is copied, not the chunk behind it; a batch longer than a chunk grows ``carry`` chunk by chunk."""
    if len(carry) < LOG_OVERHEAD:  # its length field is not complete yet
        take = min(len(view), LOG_OVERHEAD - len(carry))
        carry += view[:take]
        view = view[take:]
        if len(carry) < LOG_OVERHEAD:
            return view, False
    need = max(0, _declared_size(carry) - len(carry))
    if need > len(view):
        carry += view
        return view[len(view) :], False
    carry += view[:need]
    return view[need:], True


def _declared_size(batch_start: bytes | bytearray) -> int:
    """The size a batch's length field gives it (base offset and length field included)."""
    return LOG_OVERHEAD + read_offset_and_length(batch_start, 0)[1]


# -- READ_COMMITTED on remote pieces ------------------------------------------------------------------------------
def remote_aborted_txns(storage: RemoteStorage, piece: Piece) -> list[Any]:
    """The aborted transactions overlapping the piece's offsets, collected as Kafka's RemoteLogManager does: the
    ``.txnindex`` of the piece's segment, then of each later remote segment, until an entry's last stable offset
    reaches the piece's end (no later abort can concern it); otherwise the local log's entries the driver got."""
    from strata.remote.rsm import IndexType, RemoteResourceNotFoundError
    from strata.storage.txn_index import decode_entries, search

    lo, hi = piece.start, piece.end
    found: list[Any] = []
    for seg in (piece.segment, *piece.following):
        if getattr(seg, "txn_idx_empty", False):  # KIP-1058: copied without transaction index entries
            continue
        try:
            data = storage.call(storage.rsm.fetch_index(seg, IndexType.TRANSACTION))
        except RemoteResourceNotFoundError:
            continue  # the segment has no aborted transaction (the index is written on the first entry)
        result = search(decode_entries(data), lo, hi)
        found.extend(result.aborted_transactions)
        if result.is_complete:
            return found
    found.extend(e for e in piece.local_aborted if e.last_offset >= lo and e.first_offset < hi)
    return found


class AbortedFilter:
    """Drops the batches of aborted transactions the way a Kafka READ_COMMITTED consumer does: batches are seen in
    offset order; a producer becomes aborted at the first batch reaching its aborted transaction's first offset,
    and stops being so at its next control batch (the abort marker); its transactional batches in between are
    skipped."""

    def __init__(self, aborted: list[Any]) -> None:
        self._pending = sorted(aborted, key=lambda e: e.first_offset)
        self._next = 0
        self._active: set[int] = set()

    def skip(self, h: Any) -> bool:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= h.last_offset:
            self._active.add(pending[self._next].producer_id)
            self._next += 1
        if not h.is_transactional or h.producer_id not in self._active:
            return False
        if h.is_control:  # the abort marker closes the transaction (decode skips control batches anyway)
            self._active.discard(h.producer_id)
        return True


def read_remote_piece(
    storage: RemoteStorage,
    opts: SourceOptions,
    r: OffsetRange,
    piece: Piece,
    out: ArrowEmitter,
    aborted: AbortedFilter | None = None,
) -> Iterator[Any]:
    """``aborted``: READ_COMMITTED, the filter of the piece's aborted transactions."""
    from strata.protocol.records import is_crc_valid, iter_batches
    from strata.remote.rsm import IndexType, RemoteResourceNotFoundError

    seg = piece.segment
    lo, hi = piece.start, piece.end
    where = f"{r.topic}-{r.partition}: remote segment {seg.remote_log_segment_id.id_str}"

    def decode(buf: memoryview) -> Generator[Any, None, tuple[int, bool]]:
        """Record batches of the complete Kafka batches at the start of ``buf``; returns (the bytes those batches
        take, whether one at or past ``hi`` was reached)."""
        consumed = 0
        reached_hi = False
        wanted = []
        for bpos, h in iter_batches(buf):
            if h.base_offset >= hi:
                reached_hi = True
                break
            consumed = bpos + h.size
            if aborted is not None and aborted.skip(h):
                continue
            if h.last_offset < lo:
                continue
            if not is_crc_valid(buf, bpos):
                raise CorruptSegmentError(f"{where}: the batch at offset {h.base_offset} fails its CRC check")
            wanted.append((bpos, h))
        decoded = decode_batches(buf, wanted, lo, hi, out.columns.with_headers) if wanted else None
        if decoded is not None:
            yield from out.batches(decoded)
        return consumed, reached_hi

    try:
        first, last = 0, None
        if lo > seg.start_offset or hi <= seg.end_offset:
            idx = storage.call(storage.rsm.fetch_index(seg, IndexType.OFFSET))
            first, last = byte_range(*index_positions(idx, seg.start_offset), lo, hi)
        size = seg.segment_size_in_bytes
        stop = size if last is None else min(last + 1, size)

        # fixed-size ranged reads into reused buffers, several in flight: the object store's latency overlaps with
        # decoding; a batch cut by a chunk's end is completed from the next chunk
        chunk_bytes = opts.direct_chunk_bytes
        starts = deque(range(first, stop, chunk_bytes))
        inflight: deque[tuple[int, int, bytearray, Any]] = deque()

        def refill() -> None:
            while starts and len(inflight) < opts.direct_fetch_concurrency:
                p = starts.popleft()
                n = min(chunk_bytes, stop - p)
                buf = _buffers.get(chunk_bytes)
                fut = storage.submit(storage.rsm.fetch_log_segment_into(seg, p, memoryview(buf)[:n]))
                inflight.append((p, n, buf, fut))

        refill()
        carry = bytearray()  # the start of a batch the previous chunk's end cut
        carry_at = 0  # its position in the segment
        finished = False

        def check_cut() -> None:
            """A cut batch's length must fit the range (ranges end on batch boundaries): else the segment is
            corrupt, and the read fails now rather than after carrying the rest of the segment along."""
            if len(carry) >= LOG_OVERHEAD:
                declared = _declared_size(carry)
                if declared < HEADER_SIZE or carry_at + declared > stop:
                    raise CorruptSegmentError(
                        f"{where}: the batch at position {carry_at} declares {declared} bytes, "
                        f"which do not fit the segment's {stop} bytes"
                    )

        try:
            while inflight and not finished:
                p, n, buf, fut = inflight.popleft()
                got = fut.result()
                refill()
                if got != n:
                    raise CorruptSegmentError(
                        f"{where} returned {got} bytes for [{p}, {p + n}) (its metadata says {size} bytes)"
                    )
                view = memoryview(buf)[:n]
                if carry:
                    view, whole = complete_straddler(carry, view)
                    check_cut()
                    if whole:
                        _used, finished = yield from decode(memoryview(carry))  # (carry is replaced, not resized)
                        carry = bytearray()
                if not carry and not finished:
                    used, finished = yield from decode(view)
                    if not finished:
                        carry = bytearray(view[used:])
                        carry_at = p + n - len(view) + used
                        check_cut()
                # (a view something still pointed into would raise BufferError here instead of being reused)
                view.release()
                _buffers.put(buf)
        finally:
            for _p, _n, _buf, pending in inflight:
                pending.cancel()  # its buffer is not reused: the store may still be writing into it
        if carry and not finished:
            raise CorruptSegmentError(
                f"{where} ends inside a batch: {len(carry)} bytes after the last whole batch before position {stop}"
            )
    except RemoteResourceNotFoundError as e:
        if opts.fail_on_data_loss:
            raise DataLossError(
                data_loss_message(
                    f"{r.topic}-{r.partition}: remote segment {seg.remote_log_segment_id.id_str} holding offsets "
                    f"[{seg.start_offset}, {seg.end_offset}] is gone from remote storage ({e})"
                )
            ) from None


# -- one planned range --------------------------------------------------------------------------------------------
def read_range(opts: SourceOptions, r: OffsetRange, arrow_schema: Any) -> Iterator[Any]:
    out = ArrowEmitter(arrow_schema, r.topic, r.partition)
    for piece in r.pieces or (Piece(r.start, r.end, None),):
        if piece.segment is not None:
            storage = shared_storage(opts)
            aborted = None
            if opts.isolation_level == "read_committed":
                aborted = AbortedFilter(remote_aborted_txns(storage, piece))
            yield from read_remote_piece(storage, opts, r, piece, out, aborted)
        else:
            yield from read_broker_piece(opts, r, piece, out)
    if len(out.columns):
        yield out.take()


__all__ = [
    "AbortedFilter",
    "ArrowEmitter",
    "BufferPool",
    "RemoteStorage",
    "byte_range",
    "complete_straddler",
    "index_positions",
    "read_range",
    "remote_aborted_txns",
    "shared_storage",
]
