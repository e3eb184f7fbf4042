"""Wire-protocol surface of tiered storage (docs/architecture.md, tiered read path), on one prepared broker per
backend: a 3-partition tiered topic with 30 records per partition, segments [0-9] and [10-19] copied and deleted
locally (local log start 20, latest tiered offset 19).

* ListOffsets sentinels are gated by version: -3 below v7, -4 below v8, -5 below v9, -6 below v11 answer
  UNSUPPORTED_VERSION (35) for that partition only; at their version they answer the right offsets.
* A replica Fetch (replica_id >= 0, or v15+ ReplicaState) below the local log start gets 109
  OFFSET_MOVED_TO_TIERED_STORAGE at v14+ and OFFSET_OUT_OF_RANGE below v14; a consumer Fetch there gets the data.
* One Fetch naming several remote partitions returns data for all of them (KAFKA-14915 fixed).
* Remote storage cannot be enabled on compacted topics, nor compaction on tiered topics.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey
from tests.support.broker_proc import REPO_ROOT
from tests.support.kafka_wire import decode_records
from tests.tiered.conftest import BACKENDS
from tests.tiered.harness import (
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    OFFSET_MOVED_TO_TIERED_STORAGE,
    OFFSET_OUT_OF_RANGE,
    UNSUPPORTED_VERSION,
    Harness,
    LocalBackend,
    RemoteBackend,
    S3Backend,
    Scenario,
    _uuid_from_kafka,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "tp"
PARTITIONS = 3


@pytest.fixture(scope="module", params=BACKENDS)
def prepared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    backend: RemoteBackend
    if request.param == "local":
        backend = LocalBackend()
    else:
        backend = S3Backend(request.getfixturevalue("moto_server"), f"protocol-{tmp_path_factory.mktemp('p').name}/")
    h = Harness(Path(tmp_path_factory.mktemp(f"protocol-{request.param}")), backend)
    h.start()
    try:
        sc = Scenario("prepare").create_topic(TOPIC, partitions=PARTITIONS, configs={"local.retention.bytes": "1"})
        for p in range(PARTITIONS):
            sc.produce(TOPIC, p, 30)
        for p in range(PARTITIONS):
            sc.wait_for_offload(TOPIC, p, up_to_offset=19).expect_earliest_local_offset(TOPIC, p, 20)
        sc.run(h)
        yield h
    finally:
        h.stop()


def _list_offsets(h: Harness, version: int, specs: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """One ListOffsets request at `version` for (partition, timestamp) pairs -> {partition: (error, offset)}."""
    T = ListOffsetsRequest.ListOffsetsTopic
    kw = {"isolation_level": 0} if version >= 2 else {}
    if version >= 10:
        kw["timeout_ms"] = 30000
    req = ListOffsetsRequest[version](
        replica_id=-1,
        topics=[
            T(
                name=TOPIC,
                partitions=[
                    T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=ts, max_num_offsets=1)
                    for p, ts in specs
                ],
            )
        ],
        **kw,
    )
    with h.wire() as c:
        resp = c.request(req)
    return {p.partition_index: (p.error_code, p.offset) for p in resp.topics[0].partitions}


@pytest.mark.parametrize(
    ("sentinel", "min_version", "expected"),
    [(MAX_TIMESTAMP, 7, 29), (EARLIEST_LOCAL, 8, 20), (LATEST_TIERED, 9, 19), (EARLIEST_PENDING_UPLOAD, 11, 20)],
)
def test_list_offsets_sentinels_are_version_gated_per_partition(
    prepared: Harness, sentinel: int, min_version: int, expected: int
) -> None:
    # below its version: UNSUPPORTED_VERSION for the partition asking it; the other partition (-2) is answered
    got = _list_offsets(prepared, min_version - 1, [(0, sentinel), (1, -2)])
    assert got == {0: (UNSUPPORTED_VERSION, -1), 1: (0, 0)}, got
    got = _list_offsets(prepared, min_version, [(0, sentinel), (1, -2)])
    assert got == {0: (0, expected), 1: (0, 0)}, got
    # and the newest version answers it too
    assert _list_offsets(prepared, 11, [(2, sentinel)]) == {2: (0, expected)}


def _fetch(
    h: Harness,
    version: int,
    offsets: dict[int, int],
    replica_id: int = -1,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 64 * 1024,
    max_wait_ms: int = 500,
):
    T = FetchRequest.FetchTopic
    topic_kw: dict[str, Any]
    if version >= 13:
        tid = h.topic(TOPIC).topic_id
        assert tid is not None
        topic_kw = {"topic_id": _uuid_from_kafka(tid)}
    else:
        topic_kw = {"topic": TOPIC}
    kw = {}
    if version >= 15:
        kw["replica_state"] = FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1)
    else:
        kw["replica_id"] = replica_id
    req = FetchRequest[version](
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                partitions=[
                    T.FetchPartition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=o,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for p, o in offsets.items()
                ],
                **topic_kw,
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
        **kw,
    )
    with h.wire() as c:
        resp = c.request(req)
    assert resp.error_code == 0, resp
    return {p.partition_index: p for p in resp.responses[0].partitions}


@pytest.mark.parametrize(
    ("version", "expected_error"),
    [
        (11, OFFSET_OUT_OF_RANGE),
        (12, OFFSET_OUT_OF_RANGE),
        (13, OFFSET_OUT_OF_RANGE),
        (14, OFFSET_MOVED_TO_TIERED_STORAGE),
        (15, OFFSET_MOVED_TO_TIERED_STORAGE),
        (16, OFFSET_MOVED_TO_TIERED_STORAGE),
    ],
)
def test_replica_fetch_below_local_start(prepared: Harness, version: int, expected_error: int) -> None:
    below = _fetch(prepared, version, {0: 5}, replica_id=1)[0]
    assert below.error_code == expected_error, (version, below)
    assert not below.records, "a replica fetch below the local log start must not carry tiered data"
    assert below.log_start_offset == 0
    # at the local log start the follower gets local data
    at = _fetch(prepared, version, {0: 20}, replica_id=1)[0]
    assert at.error_code == 0, at
    assert [r.offset for r in decode_records(at.records)][:1] == [20]
    # a consumer at the same offset below the local start reads remote data
    consumer = _fetch(prepared, version, {0: 5})[0]
    assert consumer.error_code == 0, consumer
    offsets = [r.offset for r in decode_records(consumer.records)]
    assert offsets[:5] == [5, 6, 7, 8, 9], offsets  # whole batches: the one holding 5 is [5, 9]


def test_max_bytes_lets_only_the_first_partition_of_a_fetch_exceed_it(prepared: Harness) -> None:
    # Kafka's minOneMessage: partition 0 (local, offset 20) returns one batch although max.bytes is 1; the remote
    # partition after it gets nothing in this response instead of a second over-limit batch.
    parts = _fetch(prepared, 12, {0: 20, 1: 0}, max_bytes=1)
    assert [r.offset for r in decode_records(parts[0].records)][:1] == [20]
    assert (parts[1].error_code, len(parts[1].records or b"")) == (0, 0)


def test_fetch_of_several_remote_partitions_returns_data_for_all(prepared: Harness) -> None:
    before = prepared.remote_fetches(TOPIC)
    want = {p: prepared.topic(TOPIC).produced[p] for p in range(PARTITIONS)}
    attempts = []
    # cold remote reads may outlast remote.fetch.max.wait.ms on the first try (those partitions answer empty and
    # the client retries); a broker serving only the first remote partition never answers all three
    for _ in range(10):
        parts = _fetch(prepared, 12, {p: 0 for p in range(PARTITIONS)}, max_bytes=1 << 20)
        got = {p: decode_records(parts[p].records) for p in range(PARTITIONS)}
        attempts.append({p: (parts[p].error_code, len(got[p])) for p in range(PARTITIONS)})
        assert all(parts[p].error_code == 0 for p in range(PARTITIONS)), attempts
        if all(got.values()):
            break
    else:
        raise AssertionError(f"no single Fetch returned data for every remote partition: {attempts}")
    for p in range(PARTITIONS):
        recs = [r for r in got[p] if r.offset < 20]
        assert recs and recs[0].offset == 0, (p, [r.offset for r in got[p]])
        for r in recs:
            exp = want[p][r.offset]
            assert (r.key, r.value, r.timestamp) == (exp.key, exp.value, exp.timestamp), (p, r.offset)
    assert prepared.remote_fetches(TOPIC) - before >= PARTITIONS


def test_compacted_topics_cannot_use_remote_storage(prepared: Harness) -> None:
    msg = "Remote log storage only supports topics with cleanup.policy=delete"
    (
        Scenario("compacted + remote")
        .create_topic("c1", configs={"cleanup.policy": "compact"}, expect_error=msg)
        .create_topic("c2", configs={"cleanup.policy": "compact,delete"}, expect_error=msg)
        .create_topic("c3", tiered=False, configs={"cleanup.policy": "compact"})
        .update_topic_config("c3", set={"remote.storage.enable": "true"}, expect_error=msg)
        .update_topic_config(TOPIC, set={"cleanup.policy": "compact"}, expect_error=msg)
        .run(prepared)
    )
    with prepared.admin() as a:
        names = a.list_topics()
    assert "c1" not in names and "c2" not in names and "c3" in names


def test_local_retention_cannot_exceed_total_retention(prepared: Harness) -> None:
    # Kafka's LogConfig.validateRemoteStorageRetentionTime/Size, for tiered topics only
    (
        Scenario("local vs total retention")
        .create_topic(
            "r1",
            configs={"retention.ms": "60000", "local.retention.ms": "120000"},
            expect_error="Value must not be more than retention.ms property value: 60000",
        )
        .create_topic(
            "r2",
            configs={"retention.bytes": "1000000", "local.retention.bytes": "-1"},
            expect_error="Value must not be -1 as retention.bytes value is set as 1000000.",
        )
        .create_topic(
            "r3",
            configs={
                "retention.ms": "60000",
                "local.retention.ms": "60000",
                "retention.bytes": "1000000",
                "local.retention.bytes": "-2",
            },
        )
        .create_topic("r4", tiered=False, configs={"retention.ms": "60000", "local.retention.ms": "120000"})
        .update_topic_config(
            "r3",
            set={"local.retention.bytes": "2000000"},
            expect_error="Value must not be more than retention.bytes property value: 1000000",
        )
        .run(prepared)
    )


# -- tools --------------------------------------------------------------------------------------------------------
def _strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )


CUSTOM = r"(?:Optional\.empty|Optional\[CustomMetadata\{\d+ bytes\}\])"


def test_remote_log_metadata_tool_prints_like_kafkas_formatter(prepared: Harness) -> None:
    bs = prepared.broker.bootstrap
    tid = prepared.topic(TOPIC).topic_id
    assert tid is not None
    r = _strata("remote-log-metadata", "--bootstrap-server", bs)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if f"{tid}:{TOPIC}-" in ln]
    # per partition: 2 segments, each a RemoteLogSegmentMetadata (STARTED) then an update (FINISHED)
    assert len(lines) == PARTITIONS * 4, r.stdout
    seg = re.compile(
        r"^partition: (\d+), offset: (\d+), value: RemoteLogSegmentMetadata\{remoteLogSegmentId="
        r"RemoteLogSegmentId\{topicIdPartition=" + re.escape(tid) + r":tp-(\d), id=([A-Za-z0-9_-]{22})\}, "
        r"startOffset=(\d+), endOffset=(\d+), brokerId=0, maxTimestampMs=\d+, eventTimestampMs=\d+, "
        r"segmentLeaderEpochs=\{0=\5\}, segmentSizeInBytes=(\d+), customMetadata=" + CUSTOM + r", "
        r"state=COPY_SEGMENT_STARTED, txnIdxEmpty=(true|false)\}$"
    )
    upd = re.compile(
        r"^partition: (\d+), offset: (\d+), value: RemoteLogSegmentMetadataUpdate\{remoteLogSegmentId="
        r"RemoteLogSegmentId\{topicIdPartition=" + re.escape(tid) + r":tp-(\d), id=([A-Za-z0-9_-]{22})\}, "
        r"customMetadata=" + CUSTOM + r", state=COPY_SEGMENT_FINISHED, eventTimestampMs=\d+, brokerId=0\}$"
    )
    started, finished = {}, set()
    for ln in lines:
        m = seg.match(ln) or upd.match(ln)
        assert m, f"not Kafka's RemoteLogMetadataFormatter format: {ln}"
        if m.re is seg:
            started[m.group(4)] = (int(m.group(3)), int(m.group(5)), int(m.group(6)))
        else:
            finished.add(m.group(4))
    assert set(started) == finished
    assert sorted(started.values()) == [(p, s, s + 9) for p in range(PARTITIONS) for s in (0, 10)]
    # --topic keeps only that topic's records; the summary goes to stderr like kafka-console-consumer's
    r2 = _strata("remote-log-metadata", "--bootstrap-server", bs, "--topic", TOPIC)
    assert r2.returncode == 0 and sorted(r2.stdout.splitlines()) == sorted(lines), r2.stdout
    assert f"Processed a total of {len(lines)} messages" in r2.stderr
    r3 = _strata("remote-log-metadata", "--bootstrap-server", bs, "--topic", "no-such-topic")
    assert r3.returncode == 0 and r3.stdout == "", r3.stdout


def test_remote_log_metadata_tool_errors_are_one_line() -> None:
    from tests.support.broker_proc import free_port

    r = _strata("remote-log-metadata", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "5")
    assert r.returncode == 1
    err = r.stderr.strip()
    assert "connection refused" in err and "\n" not in err and "Traceback" not in err, r.stderr


def test_describe_log_dirs_reports_local_sizes(prepared: Harness) -> None:
    # DescribeLogDirs (kafka-log-dirs.sh): the local part only (one 10-record segment per partition here; the two
    # copied segments were deleted locally); v4 adds the volume's total and usable bytes, older versions -1
    seg_bytes = prepared.topic(TOPIC).shape.batch_bytes * 2
    D, R = REQUEST_CLASSES[ApiKey.DESCRIBE_LOG_DIRS], RESPONSE_CLASSES[ApiKey.DESCRIBE_LOG_DIRS]
    for version in (1, 4):
        with prepared.wire() as c:
            req = D[version](topics=[D.DescribableLogDirTopic(topic=TOPIC, partitions=[0, 1, 2, 7])])
            resp = c.recv(R, version, c.send(req))
        assert [d.error_code for d in resp.results] == [0]
        d = resp.results[0]
        assert Path(d.log_dir).is_dir()
        assert [
            (t.name, [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key) for p in t.partitions])
            for t in d.topics
        ] == [(TOPIC, [(p, seg_bytes, 0, False) for p in range(PARTITIONS)])]
        if version >= 4:
            assert d.total_bytes >= d.usable_bytes > 0
    with prepared.wire() as c:  # null topics: every partition of the broker
        every = c.recv(R, 4, c.send(D[4](topics=None)))
    assert TOPIC in {t.name for d in every.results for t in d.topics}


def test_topics_describe_shows_local_and_remote_offsets(prepared: Harness) -> None:
    seg_bytes = prepared.topic(TOPIC).shape.batch_bytes * 2
    r = _strata("topics", "--bootstrap-server", prepared.broker.bootstrap, "describe", "--topic", TOPIC)
    assert r.returncode == 0, r.stderr
    parts = [ln.strip() for ln in r.stdout.splitlines()[1:]]
    assert parts == [
        f"Topic: {TOPIC}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0\tLogStartOffset: 0\t"
        f"EndOffset: 30\tLocalLogStartOffset: 20\tLatestTieredOffset: 19\tLocalSize: {seg_bytes}\t"
        f"RemoteSize: {2 * seg_bytes}"
        for p in range(PARTITIONS)
    ], r.stdout
    # a topic without remote storage keeps kafka-topics.sh's columns
    if "plain" not in prepared.topics:
        Scenario("plain").create_topic("plain", tiered=False).run(prepared)
    r = _strata("topics", "--bootstrap-server", prepared.broker.bootstrap, "describe", "--topic", "plain")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].strip().endswith("LogStartOffset: 0\tEndOffset: 0"), r.stdout
