"""`strata dump-log` on the files a real broker writes beyond segments and indexes: producer-state `.snapshot`
files (an idempotent producer's state, in DumpLogSegments' format), the `leader-epoch-checkpoint`, a remote
segment's file names (`<base offset>-<segment id>.log` ...), and piping a long dump into `head`."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from tests.support import ck
from tests.support.broker_proc import REPO_ROOT
from tests.support.cli_run import fails, ok, strata
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def rolled(broker):
    """Topic `dl` (1 partition, 1 KiB segments, an index entry every 100 bytes) with 60 records from an idempotent
    producer, so segments roll and a producer snapshot is written at each roll."""
    ck.create_topic(broker.bootstrap, "dl", 1, config={"segment.bytes": "1024", "index.interval.bytes": "100"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0, **ck.QUIET})
    for i in range(60):
        p.produce("dl", value=b"value-%03d" % i + b"x" * 40, partition=0)
        assert p.flush(30) == 0
    return broker.partition_dir("dl", 0)


def test_producer_snapshot_and_epoch_checkpoint(rolled):
    d = rolled
    wait_until(lambda: list(d.glob("*.snapshot")), 30, message="a producer snapshot after a segment roll")
    snap = sorted(d.glob("*.snapshot"))[-1]
    out = ok(strata("dump-log", str(snap)))
    lines = out.splitlines()
    assert lines[0] == f"Dumping {snap}"
    (entry,) = lines[1:]
    # the producer's last batch below the snapshot offset: sequence = offset (one record per batch, from 0)
    snap_offset = int(snap.name.split(".")[0])
    assert entry.startswith("producerId: ") and " producerEpoch: 0 coordinatorEpoch: -1 " in entry
    assert "currentTxnFirstOffset: OptionalLong.empty" in entry
    last = snap_offset - 1
    assert f"firstSequence: {last} lastSequence: {last} lastOffset: {last} offsetDelta: 0 timestamp: " in entry

    ckpt = d / "leader-epoch-checkpoint"
    assert ok(strata("dump-log", str(ckpt))).splitlines() == [f"Dumping {ckpt}", "epoch: 0 startOffset: 0"]

    snap.write_bytes(snap.read_bytes()[:-3])  # truncated: Kafka's tool prints the error, so does ours
    r = strata("dump-log", str(snap))
    assert r.returncode == 0 and "snapshot" in r.stderr and "Traceback" not in r.stderr


def test_remote_segment_names(rolled, tmp_path):
    local = rolled / "00000000000000000000"
    remote = tmp_path / "00000000000000000000-Zm9vYmFyLWJh_ei1xdXg"  # <base offset>-<segment id base64url>
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(local.with_suffix(suffix), f"{remote}{suffix}")
    for suffix in (".log", ".index", ".timeindex"):
        ours = ok(strata("dump-log", "--deep-iteration", f"{remote}{suffix}")).splitlines()
        theirs = ok(strata("dump-log", "--deep-iteration", f"{local}{suffix}")).splitlines()
        assert ours[1:] == theirs[1:] and len(ours) > 2, suffix
    assert ok(strata("dump-log", f"{remote}.log")).splitlines()[1] == "Log starting offset: 0"
    shutil.copy(rolled / "leader-epoch-checkpoint", f"{remote}.leader_epoch_checkpoint")
    assert ok(strata("dump-log", f"{remote}.leader_epoch_checkpoint")).splitlines()[1] == "epoch: 0 startOffset: 0"

    bad = tmp_path / "segment.log"
    bad.write_bytes(b"")
    assert "is not named <20-digit offset>" in fails(strata("dump-log", str(bad)), 1)
    other = tmp_path / "notes.txt"
    other.write_text("x")
    r = strata("dump-log", str(other))
    assert r.returncode == 0 and r.stderr.strip() == f"Ignoring unknown file {other}"


def test_dump_piped_into_head(rolled):
    seg = sorted(rolled.glob("*.log"))[0]
    cmd = f"{sys.executable} -m strata dump-log --deep-iteration --print-data-log {seg} {seg} {seg} | head -n 3"
    r = subprocess.run(["bash", "-c", cmd], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert len(r.stdout.splitlines()) == 3
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
