"""Dump `.log`, `.index`, `.timeindex`, `.txnindex` and producer-state `.snapshot` files as text in the format of
Kafka's `kafka-dump-log.sh` (DumpLogSegments), so operators can diff Strata's files against Kafka's and tools that
parse that output work. Also reads what Kafka's tool does not: `leader-epoch-checkpoint` files, and the files of a
remote segment (`<base offset 20 digits>-<segment id>.log`, `.index`, ..., `.leader_epoch_checkpoint`) as the
LocalTieredStorage writes them or as downloaded from S3.

    python -m strata.storage.dump --files 00000000000000000000.log[,...] [--print-data-log] [--deep-iteration]
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from strata.protocol.records import (
    COMPRESSION_NAMES,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    compute_crc,
    iter_records,
)

from .checkpoints import CheckpointFormatError
from .epoch_cache import decode_checkpoint
from .index import OffsetIndex, TimeIndex
from .producer_state import CorruptSnapshotError, decode_snapshot

#: called with (bytes done, bytes in all) while a big file is read, for progress lines
ProgressFn = Callable[[int, int], None]
# `<base offset>.log` (local) or `<base offset>-<segment id, base64url>.log` (remote fileset)
_BASE_OFFSET = re.compile(r"(\d{20})(?:-[A-Za-z0-9_-]+)?\.")
_TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset


def base_offset(path: Path) -> int:
    """The base offset a segment file's name carries (ValueError when it carries none)."""
    m = _BASE_OFFSET.match(path.name)
    if not m:
        raise ValueError(f"{path.name} is not named <20-digit offset>[-<segment id>].<suffix>")
    return int(m.group(1))


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | memoryview]:
    """The file's bytes without reading them all into memory (a segment may be a GiB)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(m)
        try:
            yield view
        finally:
            try:
                view.release()
                m.close()
            except BufferError:  # a slice still alive; the mapping goes with the process
                pass


_CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _ts_type(h: BatchHeader) -> str:
    return "LogAppendTime" if h.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")  # Kafka's StringDecoder (UTF-8, malformed input replaced)


def format_batch(h: BatchHeader, position: int, valid: bool) -> str:
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & DELETE_HORIZON_MASK else "OptionalLong.empty"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
        f"deleteHorizonMs: {horizon} position: {position} {_ts_type(h)}: {h.max_timestamp} size: {h.size} "
        f"magic: {h.magic} compresscodec: {COMPRESSION_NAMES.get(h.compression, str(h.compression))} "
        f"crc: {h.crc} isvalid: {_bool(valid)}"
    )


def _control_suffix(key: bytes | None, value: bytes | None) -> str:
    if not key or len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    type_id = struct.unpack_from(">h", key, 2)[0]
    name = _CONTROL_TYPES.get(type_id, "UNKNOWN")
    if type_id in (0, 1) and value and len(value) >= 6:
        return f" endTxnMarker: {name} coordinatorEpoch: {struct.unpack_from('>i', value, 2)[0]}"
    return f" controlType: {name}({type_id})"


def dump_log(
    path: Path,
    out: TextIO,
    err: TextIO,
    print_data_log: bool = False,
    deep: bool = False,
    progress: ProgressFn | None = None,
) -> None:
    out.write(f"Log starting offset: {base_offset(path)}\n")
    with _mapped(path) as data:
        _dump_batches(path, data, out, err, print_data_log, deep or print_data_log, progress)


def _dump_batches(
    path: Path,
    data: bytes | memoryview,
    out: TextIO,
    err: TextIO,
    print_data_log: bool,
    deep: bool,
    progress: ProgressFn | None,
) -> None:
    pos = 0
    last_offset = -1
    gaps: list[tuple[int, int]] = []
    while pos + HEADER_SIZE <= len(data):
        h = BatchHeader(data, pos)
        if h.size < HEADER_SIZE or pos + h.size > len(data):
            break
        valid = h.magic == 2 and compute_crc(data, pos, h.size) == h.crc
        out.write(format_batch(h, pos, valid) + "\n")
        if deep and valid:
            for r in iter_records(data, pos):
                if r.offset != last_offset + 1:
                    gaps.append((last_offset, r.offset))
                last_offset = r.offset
                line = (
                    f"| offset: {r.offset} {_ts_type(h)}: {r.timestamp} "
                    f"keySize: {-1 if r.key is None else len(r.key)} "
                    f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {r.sequence} "
                    f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
                )
                if h.is_control:
                    line += _control_suffix(r.key, r.value)
                elif print_data_log:
                    if r.key is not None:
                        line += f" key: {_text(r.key)}"
                    if r.value is not None:
                        line += f" payload: {_text(r.value)}"
                out.write(line + "\n")
        pos += h.size
        if progress is not None:
            progress(pos, len(data))
    if pos < len(data):
        out.write(f"Found {len(data) - pos} invalid bytes at the end of {path.name}\n")
    if gaps:
        err.write(f"Non-consecutive offsets in {path.resolve()}\n")
        for a, b in gaps:
            err.write(f"  {a} is followed by {b}\n")


def _batch_at(log_data: bytes, position: int) -> BatchHeader | None:
    if position + HEADER_SIZE > len(log_data):
        return None
    return BatchHeader(log_data, position)


def _open_log_data(path: Path) -> bytes:
    log_path = path.with_name(path.name.split(".")[0] + ".log")
    try:
        return log_path.read_bytes()
    except FileNotFoundError:
        return b""


def dump_index(path: Path, out: TextIO, err: TextIO) -> None:
    base = base_offset(path)
    idx = OffsetIndex(path, base, os.path.getsize(path) or 8)
    try:
        if idx.entries == 0:
            out.write(f"{path} is empty.\n")
            return
        log_data = _open_log_data(path)
        mismatches: list[tuple[int, int]] = []
        for i in range(idx.entries):
            offset, position = idx.entry(i)
            if offset == base and i > 0:
                break
            h = _batch_at(log_data, position)
            batch_last = h.last_offset if h is not None else -1
            if batch_last != offset:
                mismatches.append((offset, batch_last))
            out.write(f"offset: {offset} position: {position}\n")
        if mismatches:
            err.write(f"Mismatches in :{path.resolve()}\n")
            for a, b in sorted(mismatches, reverse=True):
                err.write(f"  Index offset: {a}, log offset: {b}\n")
    finally:
        idx.close()


def dump_time_index(path: Path, out: TextIO, err: TextIO) -> None:
    base = base_offset(path)
    ti = TimeIndex(path, base, os.path.getsize(path) or 12)
    index_path = path.with_name(path.name.split(".")[0] + ".index")
    oi = (
        OffsetIndex(index_path, base, (os.path.getsize(index_path) if index_path.exists() else 0) or 8)
        if index_path.exists()
        else None
    )
    log_data = _open_log_data(path)
    mismatch: list[tuple[int, int]] = []
    out_of_order: list[tuple[int, int]] = []
    not_found: list[tuple[int, int]] = []
    try:
        prev_ts = -1
        for i in range(ti.entries):
            ts, offset = ti.entry(i)
            if offset == base and i > 0:
                break
            pos = oi.lookup(offset)[1] if oi is not None else 0
            found = None
            while pos + HEADER_SIZE <= len(log_data):
                h = BatchHeader(log_data, pos)
                if h.size < HEADER_SIZE:
                    break
                if h.last_offset >= offset:
                    found = (pos, h)
                    break
                pos += h.size
            if found is None:
                not_found.append((offset, -1))
            elif found[1].last_offset != offset:
                not_found.append((offset, found[1].last_offset))
            else:
                max_ts = max((r.timestamp for r in iter_records(log_data, found[0])), default=-1)
                if max_ts != ts:
                    mismatch.append((ts, max_ts))
                if prev_ts >= ts:
                    out_of_order.append((ts, prev_ts))
            out.write(f"timestamp: {ts} offset: {offset}\n")
            prev_ts = ts
    finally:
        ti.close()
        if oi is not None:
            oi.close()
    if mismatch:
        err.write(f"Found timestamp mismatch in :{path.resolve()}\n")
        for a, b in mismatch:
            err.write(f"  Index timestamp: {a}, log timestamp: {b}\n")
    if out_of_order:
        err.write(f"Found out of order timestamp in :{path.resolve()}\n")
        for a, b in out_of_order:
            err.write(f"  Index timestamp: {a}, Previously indexed timestamp: {b}\n")
    if not_found:
        err.write("The following indexed offsets are not found in the log.\n")
        for a, b in not_found:
            err.write(f"Indexed offset: {a}, found log offset: {b}\n")


def dump_producer_snapshot(path: Path, out: TextIO, err: TextIO) -> None:
    """Producer state as DumpLogSegments prints it (one line per producer, with its last batch)."""
    try:
        entries = decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        err.write(f"{exc}\n")
        return
    for e in entries:
        txn = f"OptionalLong[{e.current_txn_first_offset}]" if e.current_txn_first_offset >= 0 else "OptionalLong.empty"
        line = (
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {txn} lastTimestamp: {e.last_timestamp} "
        )
        if e.batches:
            b = e.batches[0]
            line += (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                f"offsetDelta: {b.offset_delta} timestamp: {b.timestamp}"
            )
        out.write(line + "\n")


def dump_txn_index(path: Path, out: TextIO, err: TextIO) -> None:
    """Aborted transactions, one line each as DumpLogSegments prints them."""
    data = path.read_bytes()
    usable = len(data) - len(data) % _TXN_ENTRY.size
    for pos in range(0, usable, _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(data, pos)
        out.write(
            f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}\n"
        )
    if usable != len(data):
        err.write(f"Found {len(data) - usable} invalid bytes at the end of {path.name}\n")


def dump_epoch_checkpoint(path: Path, out: TextIO, err: TextIO) -> None:
    """A leader-epoch checkpoint: the first offset of each leader epoch (not in Kafka's tool)."""
    try:
        entries = decode_checkpoint(path.read_bytes(), path.name)
    except CheckpointFormatError as exc:
        err.write(f"{exc}\n")
        return
    for entry in entries:
        out.write(f"epoch: {entry.epoch} startOffset: {entry.start_offset}\n")


def dump_file(
    path: Path,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    print_data_log: bool = False,
    deep_iteration: bool = False,
    progress: ProgressFn | None = None,
) -> None:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    path = Path(path)
    out.write(f"Dumping {path}\n")
    name = path.name
    if name.endswith(".log"):
        dump_log(path, out, err, print_data_log, deep_iteration, progress)
    elif name.endswith(".index"):
        dump_index(path, out, err)
    elif name.endswith(".timeindex"):
        dump_time_index(path, out, err)
    elif name.endswith(".txnindex"):
        dump_txn_index(path, out, err)
    elif name.endswith(".snapshot"):
        dump_producer_snapshot(path, out, err)
    elif name == "leader-epoch-checkpoint" or name.endswith(".leader_epoch_checkpoint"):
        dump_epoch_checkpoint(path, out, err)
    else:
        err.write(f"Ignoring unknown file {path}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="strata dump-log", description="Dump Kafka-format log segment files.")
    ap.add_argument("--files", help="comma-separated segment, index, snapshot or checkpoint files")
    ap.add_argument("paths", nargs="*", help="files (alternative to --files)")
    ap.add_argument("--print-data-log", action="store_true", help="print record keys and payloads")
    ap.add_argument("--deep-iteration", action="store_true", help="print record metadata")
    args = ap.parse_args(argv)
    files = [f for f in (args.files or "").split(",") if f] + list(args.paths)
    if not files:
        ap.error("--files is required")
    for f in files:
        dump_file(Path(f), print_data_log=args.print_data_log, deep_iteration=args.deep_iteration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
