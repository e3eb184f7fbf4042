"""strata.storage.dump: kafka-dump-log.sh compatible text for .log, .index, .timeindex."""

from __future__ import annotations

import io
import uuid

from strata.config import default_log_config
from strata.protocol.records import build_batch
from strata.storage.dump import dump_file, main
from strata.storage.log import UnifiedLog


def _log(tmp_path):
    log = UnifiedLog.open(
        tmp_path / "t-0",
        uuid.UUID(int=5),
        default_log_config(segment_bytes=1 << 20, index_interval_bytes=100),
        needs_recovery=False,
    )
    log.append_as_leader(
        build_batch(
            [(b"k1", b"hello", [("h1", b"x"), ("h2", None)], 1000), (None, b"world", None, 1005)],
            producer_id=9,
            producer_epoch=1,
            base_sequence=0,
        ),
        3,
    )
    for i in range(3):
        log.append_as_leader(build_batch([b"v" * 80], timestamp=2000 + i), 3)
    log.flush()
    return log


def _dump(path, **kw):
    out, err = io.StringIO(), io.StringIO()
    dump_file(path, out, err, **kw)
    return out.getvalue(), err.getvalue()


def test_dump_log_batches_and_records(tmp_path):
    log = _log(tmp_path)
    seg = log.segments[0]
    first = seg.read_batch(0, 61)
    from strata.protocol.records import BatchHeader

    h = BatchHeader(first)
    text, err = _dump(seg.log_path, print_data_log=True)
    lines = text.splitlines()
    assert lines[0] == f"Dumping {seg.log_path}"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2] == (
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 9 producerEpoch: 1 "
        "partitionLeaderEpoch: 3 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        f"position: 0 CreateTime: 1005 size: {h.size} magic: 2 compresscodec: none crc: {h.crc} isvalid: true"
    )
    assert lines[3] == (
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: 0 headerKeys: [h1,h2] key: k1 payload: hello"
    )
    assert lines[4] == "| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 5 sequence: 1 headerKeys: [] payload: world"
    assert lines[5].startswith(
        "baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 3 "
    )
    assert f"position: {h.size} CreateTime: 2000 " in lines[5]
    assert len(lines) == 2 + 3 + 2 * 3 and err == ""
    shallow, _ = _dump(seg.log_path)
    assert not any(ln.startswith("|") for ln in shallow.splitlines())
    assert len(shallow.splitlines()) == 2 + 4


def test_dump_reports_corruption_and_trailing_bytes(tmp_path):
    log = _log(tmp_path)
    path = log.segments[0].log_path
    log.close()
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF
    path.write_bytes(bytes(data) + b"\x00\x01\x02")
    text, _ = _dump(path)
    assert "isvalid: false" in text.splitlines()[2]
    assert text.splitlines()[-1] == f"Found 3 invalid bytes at the end of {path.name}"


def test_dump_indexes(tmp_path):
    log = _log(tmp_path)
    seg = log.segments[0]
    assert seg.offset_index.entries >= 1
    text, err = _dump(seg.offset_index.path)
    expected = [
        f"offset: {o} position: {p}" for o, p in (seg.offset_index.entry(i) for i in range(seg.offset_index.entries))
    ]
    assert text.splitlines()[1:] == expected and err == ""
    text, err = _dump(seg.time_index.path)
    expected = [
        f"timestamp: {t} offset: {o}" for t, o in (seg.time_index.entry(i) for i in range(seg.time_index.entries))
    ]
    assert text.splitlines()[1:] == expected and err == ""


def test_dump_empty_index_and_cli(tmp_path, capsys):
    log = UnifiedLog.open(tmp_path / "e-0", uuid.UUID(int=1), default_log_config(), needs_recovery=False)
    idx = log.segments[0].offset_index.path
    assert main(["--files", str(idx)]) == 0
    assert capsys.readouterr().out == f"Dumping {idx}\n{idx} is empty.\n"
