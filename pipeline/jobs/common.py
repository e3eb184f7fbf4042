"""Shared pieces of the example jobs: source options from CLI-style arguments."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import UTC, datetime


def position_options(start: str | None, end: str | None = None) -> dict[str, str]:
    """``--from``/``--until`` values -> source options.

    ``earliest`` / ``latest``; a JSON object of per-partition offsets; epoch milliseconds or an ISO-8601 time
    (``2024-05-01T00:00:00Z``) -> ``startingTimestamp`` / ``endingTimestamp``."""
    out: dict[str, str] = {}
    for name, value in (("starting", start), ("ending", end)):
        if value is None or value == "":
            continue
        v = value.strip()
        if v.lower() in ("earliest", "latest"):
            out[f"{name}Offsets"] = v.lower()
        elif v.startswith("{"):
            json.loads(v)
            out[f"{name}Offsets"] = v
        else:
            out[f"{name}Timestamp"] = str(to_millis(v))
    return out


def to_millis(v: str) -> int:
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise ValueError(
            f"{v!r} is not earliest, latest, a JSON offset map, epoch millis or an ISO-8601 time"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def job_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options a job's command line adds: its --command-config file's properties as ``kafka.*``
    options (Spark's Kafka source names), then each --option KEY=VALUE."""
    from strata.cli.command_config import read_properties

    props = read_properties(args.command_config) if getattr(args, "command_config", None) else []
    return {f"kafka.{k}": v for k, v in props} | dict(getattr(args, "option", None) or [])


def security_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` security options among `options` (for a sink writing where the source reads)."""
    from strata.cli.command_config import SECURITY_KEYS

    return {k: v for k, v in options.items() if k.startswith("kafka.") and k[len("kafka.") :] in SECURITY_KEYS}


def source_options(
    bootstrap: str,
    topic: str | None = None,
    *,
    pattern: str | None = None,
    read_mode: str = "broker",
    rsm_class: str | None = None,
    rsm_config: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "includeHeaders": "true", "read.mode": read_mode}
    if pattern:
        opts["subscribePattern"] = pattern
    elif topic:
        opts["subscribe"] = topic
    if rsm_class:
        opts["rsm.class.name"] = rsm_class
    for k, v in (rsm_config or {}).items():
        opts[k if k.startswith("rsm.config.") else f"rsm.config.{k}"] = str(v)
    opts.update({k: str(v) for k, v in (extra or {}).items()})
    return opts
