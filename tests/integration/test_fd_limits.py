"""A broker under a low descriptor limit (issue 21, "File descriptors"; issue 22, the open-file cache).

Each partition used to hold three descriptors (.log, .index, .timeindex): under `ulimit -n 1024` a 400-partition
CreateTopics hit "Too many open files" half-way (then answered KAFKA_STORAGE_ERROR and left nothing behind). Now
segment files go through a bounded open-file cache (`log.open.files.cache.size`, at most half the soft limit), so a
200-partition create (600 files) succeeds under a limit of 256, every partition is served, the broker's descriptors
stay below the limit, and it restarts under the same limit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.broker_proc import StrataBroker
from tests.support.kafka_wire import WireClient, build_batch, decode_records

NONE = 0
NOFILE = 256  # the broker starts with ~40 descriptors open; 200 partitions have 600 files

_WITH_NOFILE = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


class LimitedBroker(StrataBroker):
    """A broker whose process starts with RLIMIT_NOFILE = NOFILE (set before exec: the same pid)."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", _WITH_NOFILE, str(NOFILE), *super().command()]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def produce_error(w: WireClient, topic: str, partition: int, value: bytes) -> int:
    resp = w.produce(topic, partition, build_batch([(None, value, [])]))
    return int(resp.responses[0].partition_responses[0].error_code)


def topic_dirs(log_dir: Path, topic: str) -> list[str]:
    return [d.name for d in log_dir.iterdir() if d.name.startswith(topic + "-")]


def test_many_partitions_fit_a_low_descriptor_limit_and_the_broker_restarts(tmp_path: Path) -> None:
    b = LimitedBroker(tmp_path / "broker", name="strata-nofile")
    b.start()
    try:
        assert b.pid is not None
        with WireClient.connect(b.bootstrap) as w:
            assert w.create_topic("kept", partitions=4).topics[0].error_code == NONE
            for p in range(4):
                assert produce_error(w, "kept", p, f"before-{p}".encode()) == NONE
            resp = w.create_topic("huge", partitions=200)  # 600 files: more than the process may open
            assert resp.topics[0].error_code == NONE, resp
            for p in range(0, 200, 7):
                assert produce_error(w, "huge", p, f"h{p}".encode()) == NONE
            assert open_fds(b.pid) < NOFILE
            for p in range(4):
                assert produce_error(w, "kept", p, f"after-{p}".encode()) == NONE

        assert b.stop() == 0  # SIGTERM: a clean shutdown
        b.start()  # under the same limit
        with WireClient.connect(b.bootstrap) as w:
            for p in range(4):
                got = [r.value for r in decode_records(w.fetch("kept", p, 0).responses[0].partitions[0].records)]
                assert got == [f"before-{p}".encode(), f"after-{p}".encode()]
            for p in range(0, 200, 7):
                got = [r.value for r in decode_records(w.fetch("huge", p, 0).responses[0].partitions[0].records)]
                assert got == [f"h{p}".encode()]
            assert open_fds(b.pid) < NOFILE
    finally:
        b.stop()


def test_a_half_made_partition_dir_does_not_stop_startup(tmp_path: Path) -> None:
    """What a crash in the middle of making a partition leaves: a dir with some of its files, or none."""
    b = StrataBroker(tmp_path / "broker", name="strata-halfmade")
    b.start()
    try:
        with WireClient.connect(b.bootstrap) as w:
            assert w.create_topic("t", partitions=1).topics[0].error_code == NONE
            assert produce_error(w, "t", 0, b"v") == NONE
        b.kill9()
        (b.log_dir / "t-1").mkdir()  # empty
        half = b.log_dir / "t-2"
        half.mkdir()
        (half / "partition.metadata.tmp").write_bytes(b"version: 0\n")
        (half / "00000000000000000000.log").write_bytes(b"")
        b.start()
        with WireClient.connect(b.bootstrap) as w:
            got = decode_records(w.fetch("t", 0, 0).responses[0].partitions[0].records)
            assert [r.value for r in got] == [b"v"]
            assert produce_error(w, "t", 0, b"w") == NONE
    finally:
        b.stop()
