"""kill -9 right after append loses nothing: appends go straight to the fd (no user-space buffer)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from strata.config import default_log_config
from strata.protocol.records import iter_batches

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import os, signal, sys, uuid
    sys.path.insert(0, sys.argv[2])
    from strata.config import default_log_config
    from strata.protocol.records import build_batch
    from strata.storage.log_manager import LogManager
    cfg = default_log_config(segment_bytes=8192, index_interval_bytes=512)
    lm = LogManager([sys.argv[1]], lambda t: cfg)
    lm.startup()
    log = lm.get_or_create_log("crash-topic", 0, uuid.UUID(int=7), cfg)
    for i in range(300):
        log.append_as_leader(build_batch([b"payload-%d" % i] * 3), 2)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_kill_dash_nine_after_append_loses_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(ROOT)], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    from strata.storage.log_manager import LogManager

    cfg = default_log_config(segment_bytes=8192, index_interval_bytes=512)
    lm = LogManager([tmp_path], lambda t: cfg)
    lm.startup()  # unclean: recovers from the (absent) checkpoint, i.e. offset 0
    log = lm.get_log("crash-topic", 0)
    assert log is not None and log.topic_id == uuid.UUID(int=7)
    assert log.log_end_offset == 900 and log.num_segments > 1
    assert log.latest_epoch == 2
    offsets = []
    off = 0
    while off < log.log_end_offset:
        data = log.read(off, 1 << 20, None, True).records
        batches = [h for _, h in iter_batches(data)]
        offsets.extend(h.base_offset for h in batches)
        off = batches[-1].last_offset + 1
    assert offsets == list(range(0, 900, 3))
    lm.shutdown()
