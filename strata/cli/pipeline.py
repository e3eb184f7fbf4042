"""``strata pipeline``: the Spark jobs of strata.pipeline, whose own module builds the parser (pyspark is
imported only when a job runs, so ``strata --help`` works without the spark extra)."""

from __future__ import annotations

from .common import DEFAULT_BOOTSTRAP, SubParsers

NAME = "pipeline"


def register(sub: SubParsers) -> None:
    from strata.pipeline.cli import add_parser

    add_parser(sub, DEFAULT_BOOTSTRAP)
