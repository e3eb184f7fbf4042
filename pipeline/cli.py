"""``strata pipeline <job>``: run the example Spark jobs (strata.pipeline.jobs) from the command line.

    strata pipeline export    --topic T --to /path/out.parquet [--from earliest] [--read-mode direct ...]
    strata pipeline aggregate --topic T --to /path/per_key.parquet --checkpoint /path/ck [--once]
    strata pipeline transform --topic T --to-topic U --checkpoint /path/ck [--value EXPR] [--once]

Common options: ``--bootstrap-server``, ``--command-config FILE`` (Kafka client properties: security.protocol,
sasl.*, ssl.*, passed as the source's and the sink's ``kafka.*`` options), ``--master`` (default ``local[*]``, or
``STRATA_SPARK_MASTER``), ``--read-mode broker|direct``, ``--rsm-class`` / ``--rsm-config KEY=VALUE`` (object store
for direct mode, the broker's ``rsm.config.*`` keys), ``--option KEY=VALUE`` (any source option), ``--conf
KEY=VALUE`` (Spark conf).
Nothing here imports pyspark until a job runs, so ``strata --help`` works without the spark extra.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from strata.cli.command_config import add_command_config_option

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
JOBS = {
    "export": "export a topic's history (tiered + local) to Parquet",
    "aggregate": "streaming per-key aggregation (records, bytes, first/last time) into a Parquet table",
    "transform": "streaming topic-to-topic transform through the strata sink",
}


def _key_value(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep or not k.strip():
        raise argparse.ArgumentTypeError(f"{s!r} is not of the form key=value")
    return k.strip(), v.strip()


def _job_module(name: str) -> Any:
    import importlib

    return importlib.import_module(f"strata.pipeline.jobs.{name}")


def _common(p: argparse.ArgumentParser, default_bootstrap: str) -> None:
    p.add_argument(
        "--bootstrap-server",
        default=default_bootstrap,
        metavar="HOST:PORT",
        help=f"cluster to read (default {default_bootstrap})",
    )
    add_command_config_option(p)
    p.add_argument("--master", default=None, help="Spark master (default local[*] or $STRATA_SPARK_MASTER)")
    p.add_argument(
        "--read-mode",
        default="broker",
        choices=("broker", "direct"),
        help="direct: executors read tiered segments straight from the object store",
    )
    p.add_argument("--rsm-class", default=None, help="remote storage for direct mode: s3 (default) or local")
    p.add_argument(
        "--rsm-config",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="object store settings for direct mode, the broker's rsm.config.* keys (repeatable)",
    )
    p.add_argument(
        "--option",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="extra source option, e.g. minPartitions=8 (repeatable)",
    )
    p.add_argument(
        "--conf", type=_key_value, action="append", metavar="KEY=VALUE", help="Spark configuration (repeatable)"
    )


def _add_job(sub: Any, name: str, default_bootstrap: str) -> None:
    jp = sub.add_parser(
        name,
        help=JOBS[name],
        description=(_job_module(name).__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(jp, default_bootstrap)
    _job_module(name).add_arguments(jp)
    jp.set_defaults(func=_cmd_job, job=name)


def add_parser(sub: Any, default_bootstrap: str = DEFAULT_BOOTSTRAP) -> argparse.ArgumentParser:
    """Register ``pipeline`` on the ``strata`` command's subparsers."""
    p = sub.add_parser(
        "pipeline",
        help="run Spark jobs over topics (export, aggregate, transform)",
        description=__doc__.strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    jobs = p.add_subparsers(dest="job", required=True, metavar="{" + ",".join(JOBS) + "}")
    for name in JOBS:
        _add_job(jobs, name, default_bootstrap)
    return p


def _cmd_job(args: argparse.Namespace) -> int:
    from .options import OptionError
    from .session import SparkSetupError, check_requirements, get_spark

    prog = f"strata pipeline {args.job}"
    try:
        check_requirements()
        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None  # a notebook's or a test's session is left running
        spark = get_spark(f"strata-{args.job}", master=args.master, conf=dict(args.conf or []))
    except SparkSetupError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    try:
        return _job_module(args.job).run(spark, args)
    except (OptionError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - Spark wraps task failures; show the first meaningful line
        print(f"{prog}: error: {_first_line(e)}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    for marker in ("DataLossError: ", "ProduceError: ", "OptionError: ", "RuntimeError: "):
        if marker in text:
            return text[text.rindex(marker) :].splitlines()[0]
    return text.splitlines()[0] if text else type(e).__name__


def run_standalone(job: str, argv: list[str] | None = None) -> int:
    """``python -m strata.pipeline.jobs.<job> ...``: the same arguments as ``strata pipeline <job>``."""
    p = argparse.ArgumentParser(prog=f"python -m strata.pipeline.jobs.{job}", description=JOBS[job])
    _common(p, DEFAULT_BOOTSTRAP)
    _job_module(job).add_arguments(p)
    args = p.parse_args(argv)
    args.job = job
    return _cmd_job(args)


def main(argv: list[str] | None = None) -> int:
    """``python -m strata.pipeline.cli <job> ...`` (same as ``strata pipeline <job> ...``)."""
    p = argparse.ArgumentParser(prog="python -m strata.pipeline.cli")
    add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["pipeline", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
