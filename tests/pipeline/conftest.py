"""Fixtures for the Spark data source tests: one local SparkSession, one moto S3 server and one tiered broker (S3 on
moto) for the whole package, stopped when it is done -- JVM and broker start-up dominate the run time; each module
uses its own topics. `make test` runs the package on one worker (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pipeline.support import Tiered, start_tiered_broker
from tests.support.s3_servers import MotoServer


@pytest.fixture(scope="package")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from strata.pipeline.session import get_spark

    s = get_spark(
        "strata-tests",
        master="local[2,2]",  # a failed task is retried once, as on a cluster (spark.task.maxFailures)
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            "spark.local.dir": str(tmp_path_factory.mktemp("spark-local")),
        },
    )
    yield s
    s.stop()


@pytest.fixture(scope="package")
def pipeline_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def tiered(tmp_path_factory: pytest.TempPathFactory, pipeline_moto: MotoServer) -> Iterator[Tiered]:
    """One broker tiering to moto under a key prefix of its own, shared by the modules (distinct topic names)."""
    name = "spark-tests"
    broker, prefix = start_tiered_broker(tmp_path_factory.mktemp(name), pipeline_moto, name)
    yield Tiered(broker, prefix, pipeline_moto)
    broker.stop()


@pytest.fixture(autouse=True)
def _broker_tails(request: pytest.FixtureRequest) -> None:
    """Attach the module broker (if the test uses one) so a failure report shows its log tail."""
    if "tiered" in request.fixturenames:
        request.node._strata_brokers = [request.getfixturevalue("tiered").broker]
