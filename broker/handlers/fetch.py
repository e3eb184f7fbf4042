"""Fetch: sessionless (answers session id 0), by name (< v13) or topic id (v13+), parked in the Fetch purgatory."""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import ApiKey, response_class

from ..replica_manager import READ_UNCOMMITTED, FetchResult, FetchSpec


async def handle(server, ctx, req):
    Resp = response_class(ApiKey.FETCH)
    TopicResp = Resp.FetchableTopicResponse
    PartData = TopicResp.PartitionData
    v = ctx.api_version
    store = server.store

    if v >= 7 and req.session_id != 0:
        # We never create sessions, so a client that names one is out of sync: make it start over.
        return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0,
                    responses=[])

    replica_id = req.replica_state.replica_id if v >= 15 and req.replica_state is not None else \
        getattr(req, "replica_id", -1)
    isolation = req.isolation_level if v >= 4 else READ_UNCOMMITTED

    specs: list[FetchSpec] = []
    layout: list[tuple[object, str | None, list[tuple[int, int | None]]]] = []
    for ft in req.topics:
        if v >= 13:
            info = store.topic_by_id(ft.topic_id)
            name = info.name if info else None
        else:
            name = ft.topic
        plist = []
        for fp in ft.partitions:
            if name is None:
                plist.append((fp.partition, None))
                continue
            plist.append((fp.partition, len(specs)))
            epoch = fp.current_leader_epoch if v >= 9 else -1
            specs.append(FetchSpec(name, fp.partition, fp.fetch_offset, fp.partition_max_bytes, epoch))
        layout.append((ft, name, plist))

    max_bytes = req.max_bytes if v >= 3 else 0x7FFFFFFF
    results = await server.replica_manager.fetch(
        specs, max_bytes=max_bytes, min_bytes=req.min_bytes, max_wait_ms=req.max_wait_ms,
        isolation=isolation, replica=replica_id >= 0)

    responses = []
    aborted = [] if isolation != READ_UNCOMMITTED else None
    for ft, name, plist in layout:
        parts = []
        for index, slot in plist:
            r = results[slot] if slot is not None else FetchResult(ErrorCode.UNKNOWN_TOPIC_ID)
            if r.error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and v < 14:
                r.error = ErrorCode.OFFSET_OUT_OF_RANGE      # error 109 exists from Fetch v14 on
            parts.append(PartData(partition_index=index, error_code=r.error, high_watermark=r.high_watermark,
                                  last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                                  aborted_transactions=aborted, preferred_read_replica=-1,
                                  records=bytes(r.records)))
        responses.append(TopicResp(topic=name if v < 13 else None, topic_id=ft.topic_id if v >= 13 else None,
                                   partitions=parts))
    return Resp(version=v, throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
