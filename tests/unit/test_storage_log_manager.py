"""LogManager: startup/shutdown, checkpoints, clean-shutdown marker, recovery decision, deletion."""

from __future__ import annotations

import os
import time
import uuid

from strata.config import default_log_config
from strata.protocol.records import build_batch, iter_batches
from strata.storage.log_manager import LogManager

NOW = int(time.time() * 1000)
CFG = default_log_config(segment_bytes=2048, index_interval_bytes=256)


def manager(tmp_path, dirs=("d1",)):
    return LogManager([tmp_path / d for d in dirs], lambda topic: CFG)


def test_create_shutdown_startup_round_trip(tmp_path):
    lm = manager(tmp_path)
    lm.startup()
    tid = uuid.uuid4()
    log = lm.get_or_create_log("orders-eu", 3, tid, CFG)
    assert lm.get_or_create_log("orders-eu", 3, tid, CFG) is log
    for i in range(30):
        log.append_as_leader(build_batch([b"x" * 50], timestamp=NOW + i), 7)
    log.update_high_watermark(25)
    log.delete_records(2)
    lm.shutdown()
    d = tmp_path / "d1"
    assert (d / ".kafka_cleanshutdown").exists()
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders-eu 3 30\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\norders-eu 3 25\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\norders-eu 3 2\n"

    lm = manager(tmp_path)
    lm.startup()
    assert not (d / ".kafka_cleanshutdown").exists()
    log = lm.get_log("orders-eu", 3)
    assert log is not None and lm.get_log("orders-eu", 4) is None
    assert (log.topic_id, log.log_end_offset, log.high_watermark, log.log_start_offset) == (tid, 30, 25, 2)
    assert log.recovery_point == 30 and log.latest_epoch == 7
    assert [x.topic for x in lm.all_logs()] == ["orders-eu"]
    lm.shutdown()


def test_unclean_startup_recovers_torn_tail(tmp_path):
    lm = manager(tmp_path)
    lm.startup()
    log = lm.get_or_create_log("t", 0, uuid.uuid4(), CFG)
    for i in range(10):
        log.append_as_leader(build_batch([b"y" * 40], timestamp=NOW + i), 0)
    lm.checkpoint_recovery_points()  # recovery point 0: nothing flushed
    path = log.active_segment.log_path
    os.truncate(path, path.stat().st_size - 3)  # simulated crash: no shutdown, torn tail
    lm2 = manager(tmp_path)
    lm2.startup()
    log2 = lm2.get_log("t", 0)
    assert log2.log_end_offset == 9
    data = log2.read(0, 10**6, None, True).records
    assert [h.base_offset for _, h in iter_batches(data)] == list(range(9))
    assert log2.append_as_leader(build_batch([b"z"]), 0).first_offset == 9
    lm2.shutdown()


def test_delete_log_and_leftover_delete_dirs(tmp_path):
    lm = manager(tmp_path)
    lm.startup()
    lm.get_or_create_log("gone", 0, uuid.uuid4(), CFG).append_as_leader(build_batch([b"a"]), 0)
    lm.get_or_create_log("kept", 0, uuid.uuid4(), CFG)
    lm.delete_log("gone", 0)
    assert lm.get_log("gone", 0) is None
    assert sorted(p.name for p in (tmp_path / "d1").iterdir() if p.is_dir()) == ["kept-0"]
    leftover = tmp_path / "d1" / "x-0.0123abcd-delete"
    leftover.mkdir()
    lm.shutdown()
    lm = manager(tmp_path)
    lm.startup()
    assert not leftover.exists() and [x.topic for x in lm.all_logs()] == ["kept"]
    lm.shutdown()


def test_logs_spread_over_log_dirs(tmp_path):
    lm = manager(tmp_path, dirs=("a", "b"))
    lm.startup()
    logs = [lm.get_or_create_log("t", p, uuid.uuid4(), CFG) for p in range(4)]
    assert sorted(log.dir.parent.name for log in logs) == ["a", "a", "b", "b"]
    lm.shutdown()
    assert (tmp_path / "a" / ".kafka_cleanshutdown").exists() and (tmp_path / "b" / ".kafka_cleanshutdown").exists()


def test_retention_and_flush_scheduling(tmp_path):
    cfg = default_log_config(segment_bytes=1024, retention_ms=1000, flush_ms=100)
    lm = LogManager([tmp_path / "d"], lambda t: cfg)
    lm.startup()
    log = lm.get_or_create_log("t", 0, uuid.uuid4(), cfg)
    assert lm.flush_dirty_logs(now_ms=NOW + 10**6) == []  # nothing unflushed
    for i in range(30):
        log.append_as_leader(build_batch([b"r" * 60], timestamp=NOW + i), 0, now_ms=NOW)
    assert lm.flush_dirty_logs(now_ms=log.last_flush_time_ms + 50) == []
    assert lm.flush_dirty_logs(now_ms=log.last_flush_time_ms + 100) == [log]
    log.update_high_watermark(log.log_end_offset)
    n = log.num_segments
    assert lm.run_retention(now_ms=NOW + 60_000) == n  # every segment expired, the active one included
    assert log.log_start_offset == log.log_end_offset
    assert (tmp_path / "d" / "log-start-offset-checkpoint").read_text() == f"0\n1\nt 0 {log.log_start_offset}\n"
    lm.shutdown()


def test_flush_check_looks_only_at_logs_appended_to(tmp_path):
    """The once-a-second flush check is O(active logs): idle logs are not in its set, a flushed log leaves it and
    its next append brings it back."""
    cfg = default_log_config(flush_ms=0)
    lm = LogManager([tmp_path / "d"], lambda t: cfg)
    lm.startup()
    logs = lm.make_logs("t", list(range(50)), uuid.uuid4(), cfg)
    lm.adopt_logs(logs)
    busy = [lm.get_log("t", p) for p in (3, 17, 41)]
    for log in busy:
        assert log is not None
        log.append_as_leader(build_batch([b"v"], timestamp=NOW), 0)
    assert set(lm.flush_dirty_logs()) == set(busy)
    assert len(lm._dirty) == 3  # not 50
    for log in busy:
        assert log is not None
        log.flush()
    assert lm.flush_dirty_logs() == [] and not lm._dirty
    assert busy[0] is not None
    busy[0].append_as_leader(build_batch([b"w"], timestamp=NOW), 0)
    assert lm.flush_dirty_logs() == [busy[0]]
    lm.shutdown()


def test_a_roll_flushes_up_to_the_new_segment_so_a_crash_recovers_only_that_one(tmp_path):
    """Kafka flushes a log up to a new segment's base offset when it rolls: the recovery point follows the rolls,
    and recovery after a crash validates the active segment only (before, every segment since the last flush)."""
    lm = manager(tmp_path)
    lm.startup()
    log = lm.get_or_create_log("t", 0, uuid.uuid4(), CFG)
    other = lm.get_or_create_log("t", 1, uuid.uuid4(), CFG)
    assert lm.roll_flushes() == []
    for i in range(60):  # 2 KiB segments: several rolls
        log.append_as_leader(build_batch([b"x" * 100], timestamp=NOW + i), 0)
    other.append_as_leader(build_batch([b"y"], timestamp=NOW), 0)  # no roll: nothing to flush for it
    assert log.num_segments >= 3
    active_base = log.active_segment.base_offset
    due = lm.roll_flushes()
    assert due == [(log, active_base)]  # one entry per log, at its newest roll
    for lg, up_to in due:
        lg.flush(up_to)
    assert log.recovery_point == active_base and log.unflushed_messages > 0  # the active segment is not flushed
    assert lm.roll_flushes() == []
    lm.checkpoint_recovery_points()
    del lm  # a crash: no shutdown, no clean-shutdown marker

    lm = manager(tmp_path)
    lm.startup()  # recovers from the checkpointed recovery point: the active segment alone
    again = lm.get_log("t", 0)
    assert again is not None and again.log_end_offset == 60 and again.recovery_point == active_base
    lm.shutdown()


def _record_fsyncs(monkeypatch) -> list[str]:
    """The paths fsynced from now on: os.fsync still syncs, the descriptor's path is noted (Linux /proc)."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_clean_shutdown_syncs_only_what_is_dirty(tmp_path, monkeypatch):
    """Kafka's shutdown flushes every log, closes it with a producer snapshot at the LEO, writes the checkpoints
    once per dir and the clean-shutdown marker. Here only what changed is synced: an idle log costs no fsync, a
    log appended to by a plain producer its segment alone (no snapshot file, no dir fsync), one with producer
    state its segment, the new snapshot and the dir that holds it. The restart honours the marker and restores
    the producer state."""
    d = tmp_path / "d1"
    lm = manager(tmp_path)
    lm.startup()
    for name in ("plain", "idem", "idle", "empty"):
        lm.get_or_create_log(name, 0, uuid.uuid4(), CFG)
    idle = lm.get_log("idle", 0)
    assert idle is not None
    idle.append_as_leader(build_batch([b"before"], timestamp=NOW), 0)
    lm.shutdown()

    lm = manager(tmp_path)
    lm.startup()
    made = lm.make_logs("made", [0], uuid.uuid4(), CFG)  # a CreateTopics: its files are fsynced when made
    lm.adopt_logs(made)
    plain, idem, made_log = lm.get_log("plain", 0), lm.get_log("idem", 0), lm.get_log("made", 0)
    assert plain is not None and idem is not None and made_log is not None
    plain.append_as_leader(build_batch([b"p1", b"p2"], timestamp=NOW), 0)
    made_log.append_as_leader(build_batch([b"m"], timestamp=NOW), 0)
    idem.append_as_leader(
        build_batch([b"i1", b"i2", b"i3"], timestamp=NOW, producer_id=4242, producer_epoch=0, base_sequence=0), 0
    )
    synced = _record_fsyncs(monkeypatch)
    lm.shutdown()
    monkeypatch.undo()

    def in_dir(name: str) -> list[str]:
        return sorted(
            os.path.basename(p) if os.path.dirname(p) == str(d / name) else "<dir>"
            for p in synced
            if p == str(d / name) or os.path.dirname(p) == str(d / name)
        )

    assert in_dir("idle-0") == [] and in_dir("empty-0") == []
    assert in_dir("plain-0") == ["00000000000000000000.log"]
    assert in_dir("made-0") == ["00000000000000000000.log"]
    assert in_dir("idem-0") == ["00000000000000000000.log", "00000000000000000003.snapshot", "<dir>"]
    assert not any(p.endswith(".snapshot") for p in os.listdir(d / "plain-0"))
    assert (d / ".kafka_cleanshutdown").exists()
    assert (d / "recovery-point-offset-checkpoint").read_text().splitlines()[2:] == [
        "empty 0 0",
        "idem 0 3",
        "idle 0 1",
        "made 0 1",
        "plain 0 2",
    ]

    lm = manager(tmp_path)
    lm.startup()
    idem, plain = lm.get_log("idem", 0), lm.get_log("plain", 0)
    assert idem is not None and plain is not None
    entry = idem.producer_state.last_entry(4242)
    assert entry is not None and entry.last_seq == 2  # restored from the snapshot at the LEO
    assert len(plain.producer_state) == 0 and plain.recovery_point == plain.log_end_offset == 2
    assert not any(p.endswith(".snapshot") for p in os.listdir(d / "plain-0"))  # none written on load either
    synced = _record_fsyncs(monkeypatch)
    lm.shutdown()  # nothing appended since the start: no partition's file is synced
    assert [p for p in synced if os.path.dirname(p) != str(d) and p != str(d)] == []
