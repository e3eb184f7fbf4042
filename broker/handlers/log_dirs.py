"""DescribeLogDirs (kafka-log-dirs.sh, AdminClient.describeLogDirs): per log dir, the local size of each partition
replica held there, and the volume's total and usable bytes (v4+, KIP-827). Sizes are local: a tiered partition's
remote part is not in them (its remote size is the RemoteLogSizeBytes metric and `strata topics describe`)."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..request_context import RequestContext
from ..services import BrokerServices

if TYPE_CHECKING:
    from ..read_replica import ReadReplicaManager


async def describe_log_dirs(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_LOG_DIRS)
    Result = Resp.DescribeLogDirsResult
    Topic, Partition = Result.DescribeLogDirsTopic, Result.DescribeLogDirsTopic.DescribeLogDirsPartition
    v = ctx.api_version
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # as Kafka: no log dirs, and (v3+) the error; v1-2 have no field to say it in
        return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted: dict[str, set[int]] | None = None  # None: every partition (a null Topics array)
    if req.topics is not None:
        wanted = {}
        for t in req.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    lm = services.log_manager
    read_replicas = services.replica_manager.read_replicas
    by_dir: dict[Path, dict[str, list]] = {d.resolve(): defaultdict(list) for d in lm.log_dirs}
    for ulog in lm.all_logs():
        if wanted is not None and ulog.partition not in wanted.get(ulog.topic, ()):
            continue
        topics = by_dir.setdefault(ulog.dir.parent.resolve(), defaultdict(list))
        topics[ulog.topic].append(
            Partition(
                partition_index=ulog.partition,
                partition_size=ulog.size_in_bytes,
                offset_lag=_offset_lag(ulog, read_replicas),
                is_future_key=False,
            )
        )
    results = []
    for d, topics in sorted(by_dir.items()):
        total = usable = -1
        if v >= 4:
            try:
                usage = shutil.disk_usage(d)
                total, usable = usage.total, usage.free
            except OSError:
                pass
        results.append(
            Result(
                error_code=0,
                log_dir=str(d),
                total_bytes=total,
                usable_bytes=usable,
                topics=[
                    Topic(name=name, partitions=sorted(ps, key=lambda p: p.partition_index))
                    for name, ps in sorted(topics.items())
                ],
            )
        )
    return Resp(version=v, throttle_time_ms=0, error_code=0, results=results)


def _offset_lag(ulog: Any, read_replicas: ReadReplicaManager | None) -> int:
    """OffsetLag of a current (not future) log: max(HW - LEO, 0), as Kafka's getLogEndOffsetLag; for a read replica,
    how far its log end trails the partition's end in the origin's newest manifest."""
    st = read_replicas.state(ulog.topic, ulog.partition) if read_replicas is not None else None
    if st is not None:
        return st.lag_offsets
    return max(ulog.high_watermark - ulog.log_end_offset, 0)
