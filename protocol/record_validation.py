"""Record-level checks of a producer's magic-v2 batch (Kafka's LogValidator and DefaultRecord.readFrom): the
record section holds exactly `recordsCount` well-formed records, offset deltas 0..n-1, and what the per-record
checks (keys on compacted topics, timestamps) need.

The walk reads per record the length, attributes, timestamp delta, offset delta, key length, value length and header
count and skips the key, value and headers. It runs in C (protocol/_recwalk.c, an optional extension built by
setup.py when a compiler is there: ~16 ns per record) or, as a fallback with the same results and messages, in
Python (~0.8 us per record; bench/validate_bench.py measures both). Compressed sections are inflated with
`compression.iter_decompressed`, piece by piece, and walked as the pieces come: a bomb costs at most the bound.

Errors, as Kafka answers them: a record section that does not parse is INVALID_RECORD (Kafka's
InvalidRecordException from DefaultRecord.readFrom); a payload that does not decompress CORRUPT_MESSAGE; one that
inflates beyond the bound MESSAGE_TOO_LARGE; codec ids 5-7 UNSUPPORTED_COMPRESSION_TYPE.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from .compression import CorruptPayloadError, InflateLimitError, UnsupportedCodecError, iter_decompressed
from .errors import ErrorCode
from .records import HEADER_SIZE, NONE, Buffer, RecordBatchError
from .wire import WireFormatError, read_varint, read_varlong

__all__ = [
    "COMPILED_WALK",
    "INFLATE_CHUNK",
    "RecordErrors",
    "RecordsScan",
    "ScannedRecords",
    "check_records",
    "inflate_limit",
    "iter_record_fields",
    "scan_records",
]

INFLATE_CHUNK = 256 * 1024
MIN_INFLATE_LIMIT = 64 * 1024 * 1024


def inflate_limit(max_message_bytes: int) -> int:
    """The most bytes one batch's records may inflate to: 64 x `max.message.bytes` (the compressed bound), at least
    64 MiB. Real data compresses 2-20x (JSON, logs) and librdkafka bounds a batch's uncompressed size by
    batch.size (1 MB); 64 MiB takes ~0.1 s to inflate and walk, while a 1 MB gzip of zeros inflates to 1 GiB."""
    return max(MIN_INFLATE_LIMIT, 64 * max_message_bytes)


class RecordsScan(NamedTuple):
    """What the walk learnt: the smallest and largest timestamp delta, and the indexes of keyless records
    (only when asked: compacted topics)."""

    min_ts_delta: int
    max_ts_delta: int
    keyless: list[int] | None


def _invalid(message: str) -> RecordBatchError:
    return RecordBatchError(message, ErrorCode.INVALID_RECORD)


def _walk_py(
    p: Buffer,
    i: int,
    n: int,
    idx: int,
    count: int,
    lo: int,
    hi: int,
    keyless: list[int] | None,
    partial: bool,
) -> tuple[int, int, int, int]:
    """Walk whole records of `p[i:n]` from record number `idx`; return (position, records done, lo, hi).

    With `partial`, stop before a record that is not wholly in the buffer (more is coming); otherwise that is an
    error. Raises RecordBatchError (INVALID_RECORD) for a malformed record."""
    # Measured (bench/validate_bench.py): each field's one- and two-byte varint forms inline, one bound check per
    # record for a cut length varint, and a for loop: 500 records of 100 bytes walked in ~0.4 ms instead of 0.6.
    safe = n - 5 if partial else n - 1
    try:
        for idx in range(idx, count):  # noqa: B020 - idx is the loop's start and its result
            if i > safe and all(b >= 0x80 for b in p[i:n]):
                if partial:
                    return i, idx, lo, hi  # the length varint itself is cut: more is coming
                raise _invalid("Incorrect declared batch size, premature EOF reached")
            start = i
            c = p[i]
            if c < 0x80:
                length = (c >> 1) ^ -(c & 1)
                i += 1
            else:
                c2 = p[i + 1]
                if c2 < 0x80:
                    c = (c & 0x7F) | (c2 << 7)
                    length = (c >> 1) ^ -(c & 1)
                    i += 2
                else:
                    length, i = read_varint(p, i)
            end = i + length
            if end > n:
                if partial:
                    return start, idx, lo, hi  # not wholly here: more is coming
                raise _invalid("Incorrect declared batch size, premature EOF reached")
            if length < 6:
                raise _invalid(f"Invalid record size {length}")
            c = p[i + 1]  # p[i]: attributes, unused
            if c < 0x80:
                d = (c >> 1) ^ -(c & 1)
                j = i + 2
            elif p[i + 2] < 0x80:
                c = (c & 0x7F) | (p[i + 2] << 7)
                d = (c >> 1) ^ -(c & 1)
                j = i + 3
            else:
                d, j = read_varlong(p, i + 1)
            if d < lo:
                lo = d
            if d > hi:
                hi = d
            c = p[j]
            z = idx << 1  # the expected offset delta, zigzag-encoded: one byte below 64, two below 8192
            if c == z and z < 0x80:
                j += 1
            elif z < 0x4000 and c == (z & 0x7F) | 0x80 and p[j + 1] == z >> 7 and z >= 0x80:
                j += 2
            else:
                od, j = read_varint(p, j)
                if od != idx:
                    raise _invalid(f"Record {idx} of the batch has offset delta {od}: inner offsets must be 0..n-1")
            c = p[j]
            if c < 0x80:
                kl = (c >> 1) ^ -(c & 1)
                j += 1
            else:
                kl, j = read_varint(p, j)
            if kl >= 0:
                j += kl
            elif keyless is not None:
                keyless.append(idx)
            c = p[j]
            if c < 0x80:
                j += 1 if c & 1 else 1 + (c >> 1)  # odd: negative length, a null value
            else:
                c2 = p[j + 1]
                if c2 < 0x80:
                    c = (c & 0x7F) | (c2 << 7)
                    j += 2 if c & 1 else 2 + (c >> 1)
                else:
                    vl, j = read_varint(p, j)
                    if vl > 0:
                        j += vl
            if p[j] == 0:  # no headers: the common case
                j += 1
            else:
                hc, j = read_varint(p, j)
                if hc < 0 or hc > end - j:
                    raise _invalid(f"Found invalid number of record headers {hc}")
                for _ in range(hc):
                    hk, j = read_varint(p, j)
                    if hk < 0:
                        raise _invalid(f"Invalid negative header key size {hk}")
                    hv, j = read_varint(p, j + hk)
                    if hv > 0:
                        j += hv
            if j != end:
                raise _invalid(
                    f"Invalid record size: expected to read {length} bytes in record payload, but instead read "
                    f"{j - end + length}"
                )
            i = end
        else:
            idx = count
    except (IndexError, WireFormatError):
        raise _invalid("Found invalid record structure") from None
    return i, idx, lo, hi


def _walk_c(
    p: Buffer,
    i: int,
    n: int,
    idx: int,
    count: int,
    lo: int,
    hi: int,
    keyless: list[int] | None,
    partial: bool,
) -> tuple[int, int, int, int]:
    """`_walk_py` in C (protocol/_recwalk.c): same results and messages, ~10x faster."""
    i, idx, lo, hi, err = _recwalk.walk(p, i, n, idx, count, lo, hi, keyless, partial)
    if err is not None:
        raise _invalid(err)
    return i, idx, lo, hi


try:
    from . import _recwalk  # type: ignore[attr-defined]  # optional: built by setup.py when a compiler is there
except ImportError:  # pragma: no cover - depends on the build
    _recwalk = None
_walk = _walk_py if _recwalk is None else _walk_c
COMPILED_WALK = _recwalk is not None


def scan_records(
    buf: Buffer, pos: int, size: int, codec: int, count: int, *, want_keyless: bool, limit: int
) -> RecordsScan:
    """Walk the `count` records of the batch of `size` bytes at `buf[pos]` (codec `codec`): exactly `count`
    well-formed records, offset deltas 0..n-1, nothing left over. Raises RecordBatchError with Kafka's code."""
    keyless: list[int] | None = [] if want_keyless else None
    lo, hi = (1 << 63) - 1, -(1 << 63)
    if codec == NONE:
        view = memoryview(buf)[pos + HEADER_SIZE : pos + size]
        p = view if COMPILED_WALK else bytes(view)  # the C walk reads the buffer in place; Python indexes bytes faster
        i, idx, lo, hi = _walk(p, 0, len(p), 0, count, lo, hi, keyless, False)
        if i != len(p):
            raise _invalid("Incorrect declared batch size, records still remaining in file")
        return RecordsScan(lo, hi, keyless)
    acc = bytearray()  # inflated bytes not walked yet: a record cut by a piece boundary
    idx = 0
    skip = 0  # bytes of a big record's value still to come (skipped, not gathered)
    tail = 0  # then the size of its header section
    try:
        for piece in iter_decompressed(codec, memoryview(buf)[pos + HEADER_SIZE : pos + size], limit, INFLATE_CHUNK):
            if skip:
                if skip >= len(piece):
                    skip -= len(piece)
                    continue
                piece, skip = piece[skip:], 0
            if not piece:
                continue
            if idx == count:
                raise _invalid("Incorrect declared batch size, records still remaining in file")
            acc += piece
            while True:
                if tail:
                    if len(acc) < tail:
                        break
                    _check_headers(acc, tail)
                    del acc[:tail]
                    tail = 0
                    idx += 1
                i, idx, lo, hi = _walk(acc, 0, len(acc), idx, count, lo, hi, keyless, True)
                del acc[:i]  # O(1) in CPython: the bytearray moves its start
                if idx == count or not acc:
                    break
                head = _big_record_head(acc, idx)
                if head is None:
                    break  # an ordinary record cut by the piece boundary: the next piece completes it
                end, value_end, d, key_len = head
                lo, hi = min(lo, d), max(hi, d)
                if key_len < 0 and keyless is not None:
                    keyless.append(idx)
                tail = end - value_end
                if value_end <= len(acc):
                    del acc[:value_end]
                    continue
                skip = value_end - len(acc)
                acc.clear()
                break
    except UnsupportedCodecError as e:
        raise RecordBatchError(str(e), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE) from None
    except CorruptPayloadError as e:
        raise RecordBatchError(str(e), ErrorCode.CORRUPT_MESSAGE) from None
    except InflateLimitError as e:
        raise RecordBatchError(str(e), ErrorCode.MESSAGE_TOO_LARGE) from None
    if acc and idx == count:
        raise _invalid("Incorrect declared batch size, records still remaining in file")
    if idx != count or skip or tail:
        raise _invalid("Incorrect declared batch size, premature EOF reached")
    return RecordsScan(lo, hi, keyless)


BIG_RECORD = 1 << 20  # a record larger than this is walked without gathering its value in memory


def _big_record_head(p: bytearray, idx: int) -> tuple[int, int, int, int] | None:
    """The record at the start of `p`, cut by a piece boundary: when it is larger than BIG_RECORD and its head (up
    to the value length) is here, (its end, its value's end, timestamp delta, key length), else None."""
    try:
        length, j = read_varint(p, 0)
        if length < BIG_RECORD:
            return None
        end = j + length
        d, j = read_varlong(p, j + 1)
        od, j = read_varint(p, j)
        kl, j = read_varint(p, j)
        vl, j = read_varint(p, j + max(kl, 0))
    except (IndexError, WireFormatError):
        return None  # the head is not wholly here yet (or malformed: the walk says so once it is)
    if od != idx:
        raise _invalid(f"Record {idx} of the batch has offset delta {od}: inner offsets must be 0..n-1")
    value_end = j + max(vl, 0)
    if value_end >= end:
        raise _invalid(f"Invalid record size: expected to read {length} bytes in record payload, but instead read more")
    return end, value_end, d, kl


def _check_headers(p: bytearray, n: int) -> None:
    """The header section of a big record, `p[:n]`: a count and that many headers, exactly `n` bytes."""
    try:
        hc, j = read_varint(p, 0)
        if hc < 0 or hc > n - j:
            raise _invalid(f"Found invalid number of record headers {hc}")
        for _ in range(hc):
            hk, j = read_varint(p, j)
            if hk < 0:
                raise _invalid(f"Invalid negative header key size {hk}")
            hv, j = read_varint(p, j + hk)
            if hv > 0:
                j += hv
    except (IndexError, WireFormatError):
        raise _invalid("Found invalid record structure") from None
    if j != n:
        raise _invalid(f"Invalid record size: the headers of a record take {j} bytes, not {n}")


# A decoded record's fields: offset delta, timestamp delta, key, value, headers.
RecordFields = tuple[int, int, "bytes | None", "bytes | None", list[tuple[str, "bytes | None"]]]


def _decode_one(p: bytearray, i: int) -> tuple[RecordFields, int]:
    length, i = read_varint(p, i)
    end = i + length
    if length < 0 or end > len(p):
        raise IndexError
    ts_delta, j = read_varlong(p, i + 1)
    off_delta, j = read_varint(p, j)
    kl, j = read_varint(p, j)
    key = None if kl < 0 else bytes(p[j : j + kl])
    j += max(kl, 0)
    vl, j = read_varint(p, j)
    value = None if vl < 0 else bytes(p[j : j + vl])
    j += max(vl, 0)
    hc, j = read_varint(p, j)
    if hc < 0 or hc > end - j:
        raise IndexError
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(hc):
        hk, j = read_varint(p, j)
        name = p[j : j + hk].decode("utf-8", "replace")
        hv, j = read_varint(p, j + hk)
        headers.append((name, None if hv < 0 else bytes(p[j : j + hv])))
        j += max(hv, 0)
    if j != end:
        raise IndexError
    return (off_delta, ts_delta, key, value, headers), end


def iter_record_fields(buf: Buffer, pos: int, size: int, codec: int, count: int, limit: int) -> Iterator[RecordFields]:
    """Decode the records of the batch at `buf[pos]` lazily, inflating in bounded pieces (ListOffsets, dump-log,
    the coordinators' loaders). Raises RecordBatchError when the section is malformed or inflates past `limit`."""
    acc = bytearray()
    done = 0
    try:
        for piece in iter_decompressed(codec, memoryview(buf)[pos + HEADER_SIZE : pos + size], limit, INFLATE_CHUNK):
            acc += piece
            i = 0
            while done < count:
                try:
                    rec, nxt = _decode_one(acc, i)
                except (IndexError, WireFormatError):
                    break  # not wholly in this piece (or malformed: told apart at the end)
                yield rec
                done += 1
                i = nxt
            del acc[:i]
    except UnsupportedCodecError as e:
        raise RecordBatchError(str(e), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE) from None
    except CorruptPayloadError as e:
        raise RecordBatchError(str(e), ErrorCode.CORRUPT_MESSAGE) from None
    except InflateLimitError as e:
        raise RecordBatchError(str(e), ErrorCode.MESSAGE_TOO_LARGE) from None
    if done != count or acc:
        raise _invalid("Found invalid record structure")


class ScannedRecords(bytes):
    """A producer's records whose walk was done off the event loop: the Produce handler hands these to the append,
    which then skips its own walk and uses `scan` (keyless records included) or raises `error` (a bomb is not
    inflated a second time, on the loop)."""

    scan: RecordsScan | None = None
    error: RecordBatchError | None = None


class RecordErrors(NamedTuple):
    """Kafka's RecordValidationException: the error code, top-level message, and (batch index, message) list."""

    error_code: int
    message: str
    errors: list[tuple[int, str]]


def check_records(
    buf: Buffer,
    pos: int,
    size: int,
    fields: tuple,
    scan: RecordsScan,
    *,
    partition: str,
    compacted: bool,
    log_append_time: bool,
    ts_min: int,
    ts_max: int,
    limit: int,
) -> tuple[int, RecordErrors | None]:
    """Kafka's per-record checks (LogValidator.validateRecord) of a walked batch: keys on a compacted topic, then
    timestamps. Returns (the batch's largest record timestamp, the errors or None).

    `fields` is the header tuple (HEADER order); [ts_min, ts_max] the timestamps message.timestamp.before/after.max.ms
    allow. One error per record, key first, as Kafka."""
    base_ts, batch_max, count = fields[7], fields[8], fields[12]
    flagged_lat = bool(fields[5] & 0x08)
    if flagged_lat:
        largest = batch_max  # every record of a LogAppendTime batch reads maxTimestamp
    else:
        largest = base_ts + scan.max_ts_delta
    keyless = scan.keyless if compacted and scan.keyless else []
    bad_ts: list[tuple[int, int]] = []  # (index, timestamp)
    if log_append_time:
        if flagged_lat:
            bad_ts = [(i, batch_max) for i in range(count)]
    elif flagged_lat:
        if batch_max != -1 and not ts_min <= batch_max <= ts_max:
            bad_ts = [(i, batch_max) for i in range(count)]
    elif base_ts + scan.min_ts_delta < ts_min or largest > ts_max:
        # rare: find which records (a second, bounded walk that decodes timestamps)
        for i, rec in enumerate(iter_record_fields(buf, pos, size, fields[5] & 0x07, count, limit)):
            ts = base_ts + rec[1]
            if ts != -1 and not ts_min <= ts <= ts_max:
                bad_ts.append((i, ts))
    if not keyless and not bad_ts:
        return largest, None
    errors: dict[int, tuple[str, bool]] = {}  # index -> (message, is timestamp error)
    for i, ts in bad_ts:
        if log_append_time:
            msg = "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
        else:
            msg = (
                f"Timestamp {ts} of message with offset {i} is out of range. The timestamp should be within "
                f"[{ts_min}, {ts_max}]"
            )
        errors[i] = (msg, True)
    for i in keyless:
        errors[i] = (f"Compacted topic cannot accept message without key in topic partition {partition}", False)
    listed = sorted(errors.items())
    if any(is_ts for _, (_, is_ts) in listed):
        code, message = ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp"
    else:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, (m, _) in listed[:3])
        code = ErrorCode.INVALID_RECORD
        message = (
            f"One or more records have been rejected due to {len(listed)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]"
        )
    return largest, RecordErrors(code, message, [(i, m) for i, (m, _) in listed])
