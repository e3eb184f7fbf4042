"""Fixtures for the Spark data source tests: one local SparkSession, one moto S3 server and one tiered broker (S3 on
moto) for the whole package -- JVM and broker start-up dominate the run time; each module uses its own topics.

`make test` runs the package's tests one after another on one worker (tests/conftest.py), so they are stopped once
its last test is done rather than at the end of the session (pytest's "package" scope needs an __init__.py, which
would make these modules `pipeline.*` and shadow the product's `pipeline` package)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.pipeline.support import Tiered, start_tiered_broker
from tests.support.s3_servers import MotoServer

PACKAGE = "tests/pipeline/"
_running: list[Callable[[], None]] = []  # the stops of the services started, in start order


def _started(stop: Callable[[], object]) -> Callable[[], None]:
    """`stop`, made idempotent and run early by the hook below."""
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            stop()

    _running.append(once)
    return once


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the package's last test (the next one is elsewhere, or none): stop the JVM, broker and S3 server now.
    Only where the package's tests run together (no xdist, or its loadfile with tests/conftest.py's scheduler)."""
    if item.config.getvalue("dist") not in ("no", "loadfile"):
        return
    if nextitem is None or not nextitem.nodeid.startswith(PACKAGE):
        while _running:
            _running.pop()()


def _stop_spark(session: object) -> None:
    """The session, then its JVM: pyspark keeps the gateway's JVM until the Python process exits (~1 GiB and its
    threads for the rest of a worker's run)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    session.stop()  # type: ignore[attr-defined]
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
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
    stop = _started(lambda: _stop_spark(s))
    yield s
    stop()


@pytest.fixture(scope="session")
def pipeline_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    stop = _started(server.stop)
    yield server
    stop()


@pytest.fixture(scope="session")
def tiered(tmp_path_factory: pytest.TempPathFactory, pipeline_moto: MotoServer) -> Iterator[Tiered]:
    """One broker tiering to moto under a key prefix of its own, shared by the modules (distinct topic names)."""
    name = "spark-tests"
    broker, prefix = start_tiered_broker(tmp_path_factory.mktemp(name), pipeline_moto, name)
    stop = _started(broker.stop)
    yield Tiered(broker, prefix, pipeline_moto)
    stop()


@pytest.fixture(autouse=True)
def _broker_tails(request: pytest.FixtureRequest) -> None:
    """Attach the module broker (if the test uses one) so a failure report shows its log tail."""
    if "tiered" in request.fixturenames:
        request.node._strata_brokers = [request.getfixturevalue("tiered").broker]
