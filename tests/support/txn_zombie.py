"""A transactional producer process that the zombie-fencing tests pause (SIGSTOP) in the middle of a transaction.

It initializes, begins a transaction, writes ``<tid>:before`` and flushes, then prints ``ready`` and waits for a line
on stdin. On that line it writes ``<tid>:after``, commits, and prints one JSON line: the error it got (its name,
whether fatal) or ``{"error": null}``. Exits 0 either way.
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import KafkaError, KafkaException, Producer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--tid", required=True)
    ap.add_argument("--txn-timeout-ms", type=int, default=60000)
    args = ap.parse_args(argv)
    p = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.tid,
            "transaction.timeout.ms": args.txn_timeout_ms,
            "metadata.recovery.strategy": "none",  # see tests/support/ctp_app.py
            "log_level": 3,
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(args.topic, f"{args.tid}:before".encode(), partition=0)
    p.flush(30)
    print("ready", flush=True)
    sys.stdin.readline()
    result: dict[str, object] = {"error": None}
    try:
        p.produce(args.topic, f"{args.tid}:after".encode(), partition=0)
        p.commit_transaction(30)
    except KafkaException as e:
        err: KafkaError = e.args[0]
        result = {"error": err.name(), "fatal": err.fatal(), "abortable": err.txn_requires_abort(), "text": err.str()}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
