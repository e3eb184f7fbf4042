"""``strata iceberg status|describe --topic T``: where an Iceberg topic's table stands (docs/iceberg.md).

`status` prints, per partition, the table's next offset (from its current snapshot's summary), the partition's end
offset (ListOffsets latest), the lag in offsets and in seconds (since the last commit, while behind), and for the
table the data files, records, last commit time and the DLQ table's records. `describe` prints the table: location,
schema, partition spec, properties and current snapshot.

The catalog is the brokers': `--broker-config` (their server.properties) and `--override key=value` give the
`iceberg.catalog.*` settings, exactly as `strata serve` reads them. pyiceberg is loaded only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .admin_client import AdminClient, AdminError
from .common import SubParsers, add_bootstrap_option, add_timeout_option, error, key_value, table

NAME = "iceberg"
PROG = "strata iceberg"


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="state of an Iceberg topic's table (status, describe)")
    actions = p.add_subparsers(dest="action", required=True)
    for name, fn, what in (
        ("status", _status, "translated offsets, lag, files, last commit, DLQ records"),
        ("describe", _describe, "the table: location, schema, partition spec, properties, snapshot"),
    ):
        ap = actions.add_parser(name, help=what)
        add_bootstrap_option(ap)
        add_timeout_option(ap)
        ap.add_argument("--topic", required=True)
        ap.add_argument("--broker-config", metavar="FILE", help="the brokers' server.properties (the catalog settings)")
        ap.add_argument(
            "--override", type=key_value, action="append", default=[], metavar="KEY=VALUE", help="a broker property"
        )
        ap.set_defaults(func=lambda args, fn=fn: _run(args, fn))


def _run(args: argparse.Namespace, fn: Any) -> int:
    from strata.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.broker_config, [f"{k}={v}" for k, v in args.override])
    except ConfigError as e:
        error(PROG, str(e))
        return 1
    try:
        from strata.remote.iceberg.catalog import catalog_settings, open_catalog
    except ImportError as e:
        error(PROG, f"pyiceberg is not installed (pip install 'strata-broker[iceberg]'): {e}")
        return 1
    settings = catalog_settings(config.values, config.log_dirs[0])
    try:
        catalog = open_catalog(settings)
        table = catalog.load_table((settings.namespace, args.topic))
    except Exception as e:  # noqa: BLE001 - any catalog failure: one line, naming the catalog without secrets
        error(PROG, f"cannot load table {settings.namespace}.{args.topic} from the {settings.describe()}: {e}")
        return 1
    try:
        result: int = fn(args, catalog, settings, table)
        return result
    except AdminError as e:
        error(PROG, str(e))
        return 1


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _status(args: argparse.Namespace, catalog: Any, settings: Any, tbl: Any) -> int:
    from strata.remote.iceberg.offsets import committed_next_offsets

    snap = tbl.current_snapshot()
    summary = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
    next_offsets = committed_next_offsets(tbl)
    with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
        partitions = a.topic_partitions(args.topic)
        ends = a.list_offsets(args.topic, partitions, -1)
    last_ms = snap.timestamp_ms if snap is not None else None
    now_ms = time.time() * 1000
    rows = [["TOPIC", "PARTITION", "TABLE-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS"]]
    for p in partitions:
        nxt = next_offsets.get(p, 0)
        lag = max(0, ends[p] - nxt)
        lag_s = 0.0 if lag == 0 else (now_ms - last_ms) / 1000 if last_ms is not None else float("nan")
        rows.append([args.topic, str(p), str(nxt), str(ends[p]), str(lag), f"{lag_s:.1f}"])
    print(table(rows))
    dlq_name = (settings.namespace, f"{args.topic}~dlq")
    dlq = "-"  # no DLQ table: nothing rejected yet, or iceberg.invalid.record.action=drop
    if catalog.table_exists(dlq_name):
        dsnap = catalog.load_table(dlq_name).current_snapshot()
        dlq = dsnap.summary.additional_properties.get("total-records", "0") if dsnap is not None else "0"
    print()
    print(f"Table: {settings.namespace}.{args.topic} ({tbl.metadata.location})")
    print(f"Data files: {summary.get('total-data-files', '0')}")
    print(f"Records: {summary.get('total-records', '0')}")
    print(f"Last commit: {_when(last_ms)}")
    print(f"DLQ records: {dlq}")
    return 0


def _describe(args: argparse.Namespace, catalog: Any, settings: Any, tbl: Any) -> int:
    snap = tbl.current_snapshot()
    print(f"Table: {settings.namespace}.{args.topic}")
    print(f"Location: {tbl.metadata.location}")
    print(f"Format version: {tbl.metadata.format_version}")
    print(f"Schema:\n{tbl.schema()}")
    print(f"Partition spec: {tbl.spec()}")
    print("Properties:")
    for k, v in sorted(tbl.properties.items()):
        print(f"  {k}={v}")
    print(f"Snapshots: {len(tbl.metadata.snapshots)}")
    if snap is not None:
        print(f"Current snapshot: {snap.snapshot_id} at {_when(snap.timestamp_ms)}")
        for k, v in sorted((snap.summary.additional_properties if snap.summary else {}).items()):
            print(f"  {k}={v}")
    sys.stdout.flush()
    return 0
