"""Topic recovery (issue 24): `CreateTopics` with `remote.recovery=true` recreates a topic from the bucket.

The bucket's manifests name the topic's id, partition count, replication factor and configs, and per partition the
segments of its surviving lineage (remote/bucket_manifest_reader.py). Recovery keeps the id, takes every segment or a
window of the newest (`remote.recovery.retention.bytes` / `remote.recovery.retention.ms`,
remote/topic_recovery_plan.py), records them in the RLMM as copied (remote/remote_segment_registration.py: no data is
copied), and creates the topic with a recovery record (`TopicInfo.recovery`): each partition's log start offset, the
offset its empty local log starts at (one past the last recovered offset), the leader-epoch chain below it, and a
first leader epoch one above the old lineage's, so that producers continue in a new epoch and the new leader's
manifests sort above the old cluster's. Every replica starts its log from that record (broker/recovered_log.py).

`remote.recovery` and its window keys are request-only: they are taken out of the configs before anything is stored.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.uuids import kafka_uuid_str
from strata.remote.bucket_manifest_reader import BucketManifestReader, PartitionPlan, TopicPlan
from strata.remote.bucket_store import manifest_store_for
from strata.remote.metadata import TopicIdPartition
from strata.remote.remote_segment_registration import register_segments
from strata.remote.topic_recovery_plan import RecoveryWindow, select_topic

if TYPE_CHECKING:
    from strata.remote.rlm import RemoteLogManager

    from .topic_manager import TopicManager

log = structlog.get_logger("strata.recovery")

RECOVERY_KEY = "remote.recovery"
RETENTION_BYTES_KEY = "remote.recovery.retention.bytes"
RETENTION_MS_KEY = "remote.recovery.retention.ms"
REQUEST_ONLY_KEYS = (RECOVERY_KEY, RETENTION_BYTES_KEY, RETENTION_MS_KEY)
# DescribeConfigs answers it, read-only, only when asked for by name (strata recovery status, strata topics describe)
RECOVERY_STATE_KEY = "remote.recovery.state"


@dataclass(frozen=True)
class RecoveryRequest:
    window: RecoveryWindow


def _invalid(msg: str) -> KafkaApiError:
    return KafkaApiError(ErrorCode.INVALID_CONFIG, msg)


def take_recovery_request(configs: dict[str, str]) -> RecoveryRequest | None:
    """Remove the request-only recovery keys from `configs`; the recovery asked for, None for a plain create."""
    raw = {k: configs.pop(k) for k in REQUEST_ONLY_KEYS if k in configs}
    flag = str(raw.get(RECOVERY_KEY, "false")).strip().lower()
    if flag not in ("true", "false"):
        raise _invalid(
            f"Invalid value {raw[RECOVERY_KEY]} for configuration {RECOVERY_KEY}: Expected value to be "
            "either true or false"
        )
    window = {}
    for key in (RETENTION_BYTES_KEY, RETENTION_MS_KEY):
        if key in raw:
            try:
                window[key] = int(raw[key])
            except (TypeError, ValueError):
                raise _invalid(f"Invalid value {raw[key]} for configuration {key}: Not a number of type LONG") from None
            if window[key] < -1:
                raise _invalid(f"Invalid value {raw[key]} for configuration {key}: Value must be at least -1")
    if flag == "false":
        if window:
            raise _invalid(f"{', '.join(window)} can only be set with {RECOVERY_KEY}=true")
        return None
    return RecoveryRequest(RecoveryWindow(window.get(RETENTION_BYTES_KEY, -1), window.get(RETENTION_MS_KEY, -1)))


def first_epoch_after(pp: PartitionPlan) -> int:
    """One above every leader epoch the old lineage used (its chain, its segments, its manifest writer's)."""
    epochs = [e for e, _ in (pp.manifest.leader_epochs if pp.manifest else [])]
    epochs += [e for s in pp.segments for e in s.segment_leader_epochs]
    if pp.manifest is not None:
        epochs.append(pp.manifest.leader_epoch)
    return max(epochs, default=-1) + 1


def recovery_record(plan: TopicPlan, window: RecoveryWindow) -> dict[str, Any]:
    """What `TopicInfo.recovery` holds: per partition where its log starts and what was recovered."""
    parts: dict[str, Any] = {}
    for p, pp in sorted(plan.partitions.items()):
        chain = pp.manifest.leader_epochs if pp.manifest is not None else []
        parts[str(p)] = {
            "log_start_offset": pp.log_start_offset,
            "next_offset": pp.next_offset,
            "leader_epoch": first_epoch_after(pp),
            "leader_epochs": [[e, o] for e, o in chain if o < pp.next_offset],
            "segments": len(pp.segments),
            "bytes": pp.size_bytes,
            "problems": [f"{s.segment.object_prefix}: {s.reason}" for s in pp.problems][:10],
        }
    return {
        "recovered_at_ms": int(time.time() * 1000),
        "retention_bytes": window.retention_bytes,
        "retention_ms": window.retention_ms,
        "partitions": parts,
    }


def recovery_state_text(recovery: dict[str, Any]) -> str:
    """A recovered topic's record as DescribeConfigs' `remote.recovery.state` value (compact JSON)."""
    return json.dumps(recovery, sort_keys=True, separators=(",", ":"))


async def read_topic_plan(tm: TopicManager, name: str, window: RecoveryWindow) -> TopicPlan:
    """The topic's plan from the bucket, cut to `window`; INVALID_CONFIG when there is nothing to recover from."""
    rlm = tm.replica_manager.rlm
    if rlm is None or not tm.config["remote.log.storage.system.enable"]:
        raise _invalid(
            f"Topic '{name}' cannot be recovered: Tiered Storage functionality is disabled in the broker "
            "(remote.log.storage.system.enable=false)."
        )
    store = manifest_store_for(rlm.rsm)
    if store is None:
        raise _invalid(
            f"Topic '{name}' cannot be recovered: the remote storage manager {type(rlm.rsm).__name__} keeps no "
            "bucket manifests."
        )
    plan = (await BucketManifestReader(store).restore_plan({name})).topics.get(name)
    if plan is None or plan.manifest is None:
        raise _invalid(
            f"Topic '{name}' cannot be recovered: the bucket has no topic manifest for it "
            f"(__strata_manifests/topics/{name}-<topicId>/topic/)."
        )
    return select_topic(plan, window, int(time.time() * 1000))


@dataclass
class PreparedRecovery:
    """A recovery checked against the bucket and the cluster, ready to register its segments and create the topic."""

    plan: TopicPlan
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    record: dict[str, Any]

    async def register_segments(self, rlm: RemoteLogManager) -> int:
        segments = {
            TopicIdPartition(self.plan.topic_id, self.plan.topic, p): pp.segments
            for p, pp in self.plan.partitions.items()
        }
        return await register_segments(rlm.rlmm, segments, rlm.broker_id)

    def log_recovered(self, registered: int) -> None:
        log.info(
            "recovered topic from the bucket",
            topic=self.plan.topic,
            topic_id=kafka_uuid_str(self.plan.topic_id),
            partitions=self.partitions,
            segments=registered,
            offsets={p: [r["log_start_offset"], r["next_offset"]] for p, r in self.record["partitions"].items()},
        )


async def prepare_recovery(
    tm: TopicManager,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    request: RecoveryRequest,
) -> PreparedRecovery:
    """Check a CreateTopics of `name` from the bucket. The request's own configs override the manifest's; its
    partition count, when given, must be the manifest's; without a replication factor the manifest's is taken when
    the cluster has that many brokers."""
    if name in tm.store.topics():
        raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    plan = await read_topic_plan(tm, name, request.window)
    if partitions not in (-1, plan.partition_count):
        raise KafkaApiError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic '{name}' has {plan.partition_count} partitions in the bucket, not {partitions}.",
        )
    if replication_factor == -1 and 0 < plan.replication_factor <= len(tm.store.brokers()):
        replication_factor = plan.replication_factor
    merged = {**plan.configs, **configs}
    if str(merged.get("remote.storage.enable", "false")).lower() != "true":
        raise _invalid(f"Topic '{name}' cannot be recovered without remote.storage.enable=true.")
    return PreparedRecovery(
        plan, plan.partition_count, replication_factor, merged, recovery_record(plan, request.window)
    )


__all__ = [
    "RECOVERY_STATE_KEY",
    "recovery_state_text",
    "REQUEST_ONLY_KEYS",
    "RecoveryRequest",
    "read_topic_plan",
    "PreparedRecovery",
    "prepare_recovery",
    "recovery_record",
    "take_recovery_request",
]
