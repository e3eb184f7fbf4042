"""Iceberg topics, the pieces without a broker: `iceberg.partition.spec` parsing, READ_COMMITTED decoding of stored
batches (markers and aborted transactions skipped, the next offset moved past them), the key_value conversion, the
snapshot-summary offsets carried forward, and a commit refused once another leader moved the partition's offset."""

from __future__ import annotations

import random
import threading
import time
import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from strata.config import ConfigError, default_log_config
from strata.config.iceberg import PartitionField, parse_partition_spec
from strata.protocol.records import build_batch, iter_batches, iter_records
from strata.protocol.txn_markers import build_end_txn_marker
from strata.remote.iceberg.catalog import ensure_table
from strata.remote.iceberg.commit import OffsetConflictError, commit_files, write_data_files
from strata.remote.iceberg.convert import KeyValueConverter
from strata.remote.iceberg.offsets import committed_next_offsets
from strata.remote.iceberg.records import decode_committed
from strata.remote.iceberg.schema import KEY_VALUE_SCHEMA
from strata.storage.log import UnifiedLog
from strata.storage.txn_index import AbortedTxn


def test_partition_spec_terms():
    assert parse_partition_spec("") == []
    assert parse_partition_spec("hour(timestamp), bucket(16, key) ,identity(partition)") == [
        PartitionField("hour", "timestamp"),
        PartitionField("bucket", "key", 16),
        PartitionField("identity", "partition"),
    ]
    for bad in (
        "hour(timestamp",
        "month(timestamp)",
        "bucket(0, key)",
        "bucket(key)",
        "hour(timestamp),hour(timestamp)",
    ):
        with pytest.raises(ConfigError):
            parse_partition_spec(bad)


def _txn(base: int, pid: int, values: list[bytes]) -> bytes:
    return build_batch(values, base, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)


def test_decode_skips_markers_and_aborted_transactions():
    ts = 1_700_000_000_000
    log = b"".join(
        [
            build_batch([(b"k0", b"plain", [("h", b"v")])], 0, timestamp=ts),  # 0
            _txn(1, 7, [b"a1", b"a2"]),  # 1-2: aborted (pid 7)
            _txn(3, 8, [b"c1"]),  # 3: committed (pid 8)
            build_end_txn_marker(7, 0, commit=False, coordinator_epoch=0, base_offset=4),  # 4
            build_end_txn_marker(8, 0, commit=True, coordinator_epoch=0, base_offset=5),  # 5
            build_batch([b"after"], 6, timestamp=ts),  # 6
            build_batch([b"above-lso"], 7, timestamp=ts),  # 7: not below the upper bound
        ]
    )
    chunk = decode_committed("t", 2, log, 0, 7, [AbortedTxn(7, 1, 4, 1)])
    assert chunk.offsets == [0, 3, 6]
    assert chunk.values == [b"plain", b"c1", b"after"]
    assert chunk.next_offset == 7
    assert chunk.headers[0] == [("h", b"v")] and chunk.keys[0] == b"k0" and chunk.timestamps[0] == ts
    # resuming inside the range reads only what follows
    later = decode_committed("t", 2, log, 5, 7, [])
    assert later.offsets == [6] and later.next_offset == 7
    rows, bad = KeyValueConverter()(chunk)
    assert not bad and rows.schema == KEY_VALUE_SCHEMA
    assert rows.column("partition").to_pylist() == [2, 2, 2]
    assert rows.column("timestamp").to_pylist()[0].timestamp() * 1000 == ts


def test_commits_carry_offsets_forward_and_refuse_a_moved_offset(tmp_path):
    cat = SqlCatalog("strata", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    ident = ("strata", "orders.v1")
    table = ensure_table(cat, ident, KEY_VALUE_SCHEMA, parse_partition_spec("hour(timestamp)"), {})

    def rows(partition: int, offsets: list[int]) -> pa.Table:
        chunk = decode_committed(
            "orders.v1", partition, b"".join(build_batch([b"x"], o) for o in offsets), offsets[0], 10**9, []
        )
        return KeyValueConverter()(chunk)[0]

    commit_files(cat, ident, write_data_files(table, rows(0, [0, 1])), 0, None, 2, "tid")
    commit_files(cat, ident, write_data_files(table, rows(1, [0])), 1, None, 1, "tid")
    assert committed_next_offsets(cat.load_table(ident)) == {0: 2, 1: 1}
    # a translator that still believes partition 0 is at 0 (a deposed leader) cannot commit its files
    files = write_data_files(table, rows(0, [0, 1]))
    with pytest.raises(OffsetConflictError):
        commit_files(cat, ident, files, 0, None, 2, "tid")
    assert cat.load_table(ident).scan().to_arrow().num_rows == 3


def test_racing_leaders_commit_each_range_once(tmp_path):
    """A deposed leader and the new one translate the same ranges at the same moment (two threads, one SQLite
    catalog): for every range exactly one commit lands, the other is refused, and the table holds each offset once."""
    cat = SqlCatalog("strata", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    ident = ("strata", "race")
    table = ensure_table(cat, ident, KEY_VALUE_SCHEMA, [], {})
    outcomes: list[str] = []

    def translate(start: int, end: int) -> None:
        chunk = decode_committed("race", 0, b"".join(build_batch([b"x"], o) for o in range(start, end)), start, end, [])
        files = write_data_files(table, KeyValueConverter()(chunk)[0])
        try:
            commit_files(cat, ident, files, 0, None if start == 0 else start, end, "tid")
            outcomes.append("committed")
        except OffsetConflictError:
            outcomes.append("refused")

    for start in range(0, 40, 5):
        racers = [threading.Thread(target=translate, args=(start, start + 5)) for _ in range(2)]
        for t in racers:
            t.start()
        for t in racers:
            t.join(30)
    assert outcomes.count("committed") == 8 and outcomes.count("refused") == 8
    offsets = sorted(cat.load_table(ident).scan().to_arrow().column("offset").to_pylist())
    assert offsets == list(range(40))
    assert committed_next_offsets(cat.load_table(ident)) == {0: 40}


def test_decoder_agrees_with_iter_records():
    """The translator's own record loop reads what the protocol's reference decoder reads: compressed batches, null
    keys/values/header values, multi-byte varints (long keys, many headers), and offsets before the start dropped."""
    rnd = random.Random(5)
    specs = []
    for i in range(300):
        key = None if i % 7 == 0 else rnd.randbytes(rnd.choice((0, 3, 200)))
        value = None if i % 11 == 0 else rnd.randbytes(rnd.choice((0, 64, 5000)))
        hdrs = [(f"h{j}-é", None if j == 2 else rnd.randbytes(j * 30)) for j in range(i % 5)]
        specs.append((key, value, hdrs, 1_700_000_000_000 + i * 1000))
    data = b"".join(
        build_batch(specs[k : k + 60], k, compression=codec)
        for k, codec in zip(range(0, 300, 60), (0, 1, 2, 3, 4))  # none, gzip, snappy, lz4, zstd
    )
    chunk = decode_committed("t", 0, data, 7, 10**9, [])
    want = [r for _pos, h in iter_batches(data) for r in iter_records(data, _pos) if r.offset >= 7]
    assert chunk.offsets == [r.offset for r in want] and len(want) == 293
    assert chunk.keys == [r.key for r in want]
    assert chunk.values == [r.value for r in want]
    assert chunk.headers == [r.headers for r in want]
    assert chunk.timestamps == [r.timestamp for r in want]


def test_retention_keeps_untranslated_segments_up_to_the_cap(tmp_path):
    """An Iceberg topic's leader log: retention deletes only segments below the hold (the table's next offset),
    unless the untranslated closed segments exceed the cap; without a hold it deletes as usual."""
    now = int(time.time() * 1000)
    log = UnifiedLog.open(
        tmp_path / "ice-0",
        uuid.UUID(int=1),
        default_log_config(segment_bytes=1024, retention_ms=1),
        needs_recovery=False,
    )
    for i in range(40):
        log.append_as_leader(build_batch([b"v" * 40, b"w" * 40], timestamp=now + i), 0, now_ms=now)
    log.update_high_watermark(log.log_end_offset)
    segs = log.segments
    assert len(segs) >= 5
    hold = segs[2].base_offset  # the table holds everything below the third segment
    log.retention_hold_offset = hold
    log.retention_hold_max_bytes = -1
    untranslated = log.untranslated_bytes()
    assert untranslated == sum(s.size for s in segs[2:-1])
    assert log.delete_retention_breached_segments(now_ms=now + 60_000) == 2
    assert log.log_start_offset == hold  # nothing untranslated went
    log.retention_hold_max_bytes = untranslated - 1  # past the cap: retention wins
    assert log.delete_retention_breached_segments(now_ms=now + 60_000) > 0
    assert log.log_start_offset > hold
    log.close()


def test_catalog_settings_defaults_and_secrets(tmp_path):
    """The warehouse defaults to the remote storage, and no secret reaches a repr or the description logs print."""
    from strata.remote.iceberg.catalog import catalog_settings

    local = catalog_settings({}, tmp_path)
    assert local.uri == f"sqlite:///{tmp_path}/iceberg/catalog.db"
    assert local.warehouse == f"file://{tmp_path}/iceberg/warehouse"
    tiered = catalog_settings(
        {"remote.log.storage.system.enable": True, "remote.log.storage.manager.class.name": "local"}, tmp_path
    )
    assert tiered.warehouse == f"file://{tmp_path}/iceberg"
    s3 = catalog_settings(
        {
            "remote.log.storage.system.enable": True,
            "remote.log.storage.manager.class.name": "s3",
            "rsm.config.s3.bucket.name": "lake",
            "rsm.config.key.prefix": "prod/",
            "rsm.config.s3.endpoint.url": "http://127.0.0.1:9000",
            "rsm.config.aws.access.key.id": "AKIDEXAMPLE",
            "rsm.config.aws.secret.access.key": "s3-secret-value",
            "iceberg.catalog.type": "rest",
            "iceberg.catalog.uri": "https://user:uri-password@catalog.example/api",
            "iceberg.catalog.credential": "client:rest-secret-value",
            "iceberg.catalog.prop.s3.path-style-access": "true",
        },
        tmp_path,
    )
    assert s3.warehouse == "s3://lake/prod/iceberg/"
    props = s3.catalog_properties()
    assert props["s3.endpoint"] == "http://127.0.0.1:9000" and props["s3.secret-access-key"] == "s3-secret-value"
    assert props["credential"] == "client:rest-secret-value" and props["s3.path-style-access"] == "true"
    for shown in (repr(s3), s3.describe()):
        for secret in ("s3-secret-value", "rest-secret-value", "uri-password", "AKIDEXAMPLE"):
            assert secret not in shown
