"""Produce: validate acks, append each partition's batches, answer per partition (or not at all for acks=0)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.produce_codec import PartitionAnswer, ProduceAnswer
from strata.protocol.record_validation import COMPILED_WALK, RecordsScan, ScannedRecords, inflate_limit, scan_records
from strata.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER,
    HEADER_SIZE,
    TRANSACTIONAL_MASK,
    RecordBatchError,
    check_produce_records,
    is_crc_valid,
)

from ..authorization import authorize, filter_authorized
from ..authorized_ops import AclOperation, ResourceType
from ..network import CloseConnection
from ..request_context import RequestContext
from ..services import BrokerServices
from ..tiered import REMOTE_LOG_METADATA_TOPIC, RLMM_PRODUCER_CLIENT_ID
from .leadership import leader_endpoints

# Where the record walk leaves the event loop (bench/validate_bench.py): a thread hop costs ~0.06-0.1 ms; the walk
# ~16 ns per record in C (~0.8 us in the Python fallback) plus inflation (which releases the GIL). Batches worth
# ~1 ms of work go to a worker thread: a compressed section of 64 KiB (a bomb stopped by the bound costs ~0.1-0.5 s
# there), or 1,000 records when the walk runs in Python.
PRESCAN_MIN_COMPRESSED_BYTES = 64 * 1024
PRESCAN_MIN_RECORDS = 1000 if not COMPILED_WALK else 1 << 31
TRANSACTIONAL_BYTE = ATTRIBUTES_OFFSET + 1  # the low byte of a batch's attributes (int16) holds the flag


async def prescan_large_batches(services: BrokerServices, entries: list[tuple[str, int, bytes | memoryview]]) -> None:
    """Walk the records of large batches off the event loop (inflating a compressed one is the costly part), so a
    1 MB batch, or a bomb stopped by the inflation bound, does not stall other clients. The walked batch replaces
    the entry as ScannedRecords (with the walk's result or its error); the append then only applies the
    per-record checks, or reports the error."""
    jobs = []
    for k, (name, index, records) in enumerate(entries):
        if len(records) < (PRESCAN_MIN_COMPRESSED_BYTES if COMPILED_WALK else HEADER_SIZE):
            continue  # (with the C walk only a large compressed batch goes: the header is not even read)
        f = HEADER.unpack_from(records, 0)
        codec = f[5] & COMPRESSION_MASK
        if not (codec and len(records) >= PRESCAN_MIN_COMPRESSED_BYTES) and f[12] < PRESCAN_MIN_RECORDS:
            continue
        p = services.replica_manager.partitions.get((name, index))
        if p is None or not p.is_leader or not is_crc_valid(records):
            continue
        limit = inflate_limit(p.log.config.max_message_bytes)
        jobs.append(
            (k, asyncio.to_thread(scan_records, records, 0, len(records), codec, f[12], want_keyless=True, limit=limit))
        )
    if not jobs:
        return
    results = await asyncio.gather(*(j for _, j in jobs), return_exceptions=True)
    for (k, _), res in zip(jobs, results):
        if isinstance(res, RecordsScan | RecordBatchError):
            name, index, records = entries[k]
            scanned = ScannedRecords(records)
            if isinstance(res, RecordsScan):
                scanned.scan = res
            else:
                scanned.error = res
            entries[k] = (name, index, scanned)


async def verify_transactional(
    services: BrokerServices,
    ctx: RequestContext,
    req: Any,
    topic: str,
    index: int,
    records: bytes | memoryview,
    verified: set[int],
) -> ErrorCode | None:
    """A transactional batch needs WRITE on the request's transactional id, and its producer's ongoing transaction
    must include the partition (KIP-890 part 1, asked of the transaction coordinator). None: append it;
    its producer joins `verified`."""
    if len(records) < HEADER_SIZE:
        return None
    f = HEADER.unpack_from(records, 0)
    if not f[5] & TRANSACTIONAL_MASK or f[9] < 0:
        return None
    tid = req.transactional_id if ctx.api_version >= 3 else None
    if tid is None or not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    err = await services.txn_coordinator.verify_produce(tid, f[9], f[10], (topic, index))
    if err:
        return err
    verified.add(f[9])
    return None


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> ProduceAnswer | None:
    """The request decoded by protocol/produce_codec.py (or, when not canonical, by kafka-python's codec: the same
    attribute names); the answer is encoded by produce_codec."""
    v = ctx.api_version
    store = services.store

    # Resolve topic names first (v13+ addresses topics by id).
    topics: list[tuple[Any, str | None, uuid.UUID | None]] = []  # (request entry, name, topic id)
    for td in req.topic_data:
        if v >= 13:
            info = store.topic_by_id(td.topic_id)
            topics.append((td, info.name if info else None, td.topic_id))
        else:
            topics.append((td, td.name, None))

    # WRITE on each topic, decided once per topic; a topic not allowed answers TOPIC_AUTHORIZATION_FAILED before any
    # other check (so it does not tell whether the topic exists), as Kafka's handleProduceRequest
    writable = filter_authorized(
        ctx, AclOperation.WRITE, ResourceType.TOPIC, (n for _, n, _ in topics if n is not None)
    )

    fixed_error: ErrorCode | None = None
    if v < 3:
        fixed_error = ErrorCode.UNSUPPORTED_VERSION  # magic v0/v1 message sets are not accepted (Kafka 4)
    elif req.acks not in (0, 1, -1):
        fixed_error = ErrorCode.INVALID_REQUIRED_ACKS

    entries: list[tuple[str, int, bytes | memoryview]] = []
    verified: set[int] = set()  # producers whose transactional batches the coordinator verified (KIP-890)
    # (topic idx, partition idx, pre-append error and its message)
    slots: list[tuple[int, int, int | None, str | None]] = []
    for ti, (td, name, _tid) in enumerate(topics):
        for pd in td.partition_data:
            err: int | None = fixed_error
            message = None
            if err == ErrorCode.UNSUPPORTED_VERSION:
                pass
            elif name is None:
                err = ErrorCode.UNKNOWN_TOPIC_ID
            elif name not in writable:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif err is not None:
                pass
            elif pd.records is None:
                err = ErrorCode.INVALID_RECORD
            else:
                records = pd.records
                try:
                    check_produce_records(v, records)
                except RecordBatchError as e:
                    err, message = e.error_code, str(e)
                else:
                    if len(records) > TRANSACTIONAL_BYTE and records[TRANSACTIONAL_BYTE] & TRANSACTIONAL_MASK:
                        err = await verify_transactional(services, ctx, req, name, pd.index, records, verified)
                    if err is None:
                        entries.append((name, pd.index, records))
            slots.append((ti, pd.index, err, message))
    if entries:
        await prescan_large_batches(services, entries)

    # another broker's RLMM writing to a metadata partition led here (see RLMM_PRODUCER_CLIENT_ID)
    internal = (
        bool(entries)
        and (ctx.client_id or "").startswith(RLMM_PRODUCER_CLIENT_ID)
        and all(name == REMOTE_LOG_METADATA_TOPIC for name, _, _ in entries)
    )
    results = (
        iter(
            await services.replica_manager.append_records(
                entries,
                internal=internal,
                required_acks=req.acks,
                timeout_ms=req.timeout_ms,
                verified_producers=frozenset(verified),
            )
        )
        if entries
        else iter(())
    )

    any_error = False
    by_topic: list[list[PartitionAnswer]] = [[] for _ in topics]
    leaders: set[int] = set()
    for ti, index, err, message in slots:
        if err is not None:
            pa = PartitionAnswer(index, err, error_message=message)
        else:
            r = next(results)
            err = r.error
            if err:
                pa = PartitionAnswer(
                    index,
                    err,
                    r.base_offset,
                    r.log_append_time,
                    r.log_start_offset,
                    r.message,
                    r.record_errors if v >= 8 else None,
                    r.current_leader if v >= 10 else None,
                )
                if v >= 10 and r.current_leader is not None:
                    leaders.add(r.current_leader[0])  # KIP-951: the new leader, so the client need not ask Metadata
            else:
                pa = PartitionAnswer(index, 0, r.base_offset, r.log_append_time, r.log_start_offset)
        any_error |= err != ErrorCode.NONE
        by_topic[ti].append(pa)

    if req.acks == 0:
        # No response for acks=0; on error Kafka closes the connection so the producer refreshes its metadata.
        if any_error:
            raise CloseConnection
        return None
    responses = [(name if v < 13 else None, tid, by_topic[ti]) for ti, (_td, name, tid) in enumerate(topics)]
    return ProduceAnswer(v, responses, leader_endpoints(services, ctx.listener, leaders) if leaders else ())
