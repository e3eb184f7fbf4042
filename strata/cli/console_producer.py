"""``strata console-producer``: stdin lines to a topic, like kafka-console-producer.sh (same options and
``--property`` names: parse.key, key.separator, parse.headers, headers.delimiter, headers.separator,
headers.key.separator, null.marker, ignore.error). The producer is kafka-python's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .clients import ClientConfigError, bootstrap_list, client_config
from .command_config import read_properties
from .common import SubParsers, add_bootstrap_option, add_client_config_options, add_property_options, error
from .console_format import FormatError, LineReader

NAME = "console-producer"
PROG = "strata console-producer"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="produce stdin lines to a topic (kafka-console-producer.sh)")
    add_bootstrap_option(p, command_config=False)
    p.add_argument("--topic", required=True)
    add_property_options(
        p,
        ("--property", "--reader-property"),
        "line reader property (parse.key, key.separator, ...)",
        ("--reader-config",),
    )
    add_client_config_options(p, "producer", properties=True)
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement before the next")
    p.add_argument("--compression-codec", nargs="?", const="gzip", choices=CODECS, default="none")
    p.add_argument("--batch-size", type=int, default=16 * 1024, help="batch.size in bytes (default 16384)")
    p.add_argument("--timeout", type=int, default=1000, metavar="MS", help="linger.ms (default 1000)")
    p.add_argument("--request-required-acks", default="-1", choices=("-1", "0", "1", "all"))
    p.add_argument("--request-timeout-ms", type=int, default=1500)
    p.add_argument("--message-send-max-retries", type=int, default=3)
    p.add_argument("--retry-backoff-ms", type=int, default=100)
    p.add_argument("--max-block-ms", type=int, default=60_000)
    p.add_argument("--metadata-expiry-ms", type=int, default=5 * 60 * 1000)
    p.set_defaults(func=run)


def producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    from kafka import KafkaProducer

    acks: int | str = "all" if args.request_required_acks in ("-1", "all") else int(args.request_required_acks)
    props = read_properties(args.producer_config) if args.producer_config else []
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap_list(args.bootstrap_server),
        "client_id": "console-producer",
        "acks": acks,
        "compression_type": None if args.compression_codec == "none" else args.compression_codec,
        "batch_size": args.batch_size,
        "linger_ms": args.timeout,
        "request_timeout_ms": args.request_timeout_ms,
        "retries": args.message_send_max_retries,
        "retry_backoff_ms": args.retry_backoff_ms,
        "max_block_ms": args.max_block_ms,
        "metadata_max_age_ms": args.metadata_expiry_ms,
    }
    settings.update(client_config(KafkaProducer.DEFAULT_CONFIG, props + args.producer_property))
    return settings


def run(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    try:
        reader_props = dict(read_properties(args.property_file) if args.property_file else [])
        reader_props.update(args.property)
        reader = LineReader.from_properties(reader_props)
        settings = producer_settings(args)
    except (FormatError, ClientConfigError) as e:
        error(PROG, str(e))
        return 2
    from kafka import KafkaProducer

    failures: list[str] = []

    def failed(exc: BaseException) -> None:
        if not failures:  # one line, the first cause; the count is reported at the end
            print(f"{PROG}: error when sending a record to topic {args.topic}: {exc}", file=sys.stderr)
        failures.append(str(exc))

    try:
        producer = KafkaProducer(**settings)
    except KafkaError as e:
        error(PROG, f"cannot connect to {args.bootstrap_server}: {e}")
        return 1
    except (AssertionError, ValueError) as e:  # kafka-python's checks of its settings
        error(PROG, f"bad producer setting: {e}")
        return 2
    try:
        for n, raw in enumerate(sys.stdin.buffer, start=1):  # UTF-8 whatever the locale, as Kafka's reader
            line = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
            headers, key, value = reader.parse(line, n)
            if any(v is None for _, v in headers) or (key is None and value is None):
                # kafka-python's producer refuses both (Kafka's does not): say so instead of its TypeError
                raise FormatError(
                    f"line number {n}: a null header value, or a null key with a null value, cannot be sent"
                )
            future = producer.send(args.topic, value=value, key=key, headers=headers)
            if args.sync:
                try:
                    future.get(timeout=(args.request_timeout_ms + args.max_block_ms) / 1000)
                except KafkaError as e:
                    failed(e)
            else:
                future.add_errback(failed)
        producer.flush()
    except FormatError as e:
        error(PROG, str(e))
        return 1
    except KafkaError as e:
        failed(e)
    finally:
        producer.close(timeout=5)
    if failures:
        error(PROG, f"{len(failures)} record(s) were not written")
        return 1
    return 0
