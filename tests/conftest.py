"""Shared pytest fixtures: Strata broker processes for the integration tests.

* ``broker_factory`` (function scope): ``broker_factory(**overrides)`` starts a fresh broker in the test's tmp dir.
  A test may start several; all are stopped by PID at teardown.
* ``broker``: one fresh broker with default settings (function scope).
* ``module_broker``: one broker shared by every test of a module (for tests that only need "a broker"); a module
  can set ``MODULE_BROKER_OVERRIDES = {...}`` to configure it.

When a test fails, the tail of every running broker's stdout/stderr is attached to the report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pluggy
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.broker_proc import StrataBroker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: starts a real broker process and real clients")


SPARK_PACKAGE = "tests/pipeline/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark package first (a stable sort keeps every other order): under `make test` it is one scheduling unit
    (below), the longest, so it starts at once rather than last."""
    items.sort(key=lambda item: not item.nodeid.startswith(SPARK_PACKAGE))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile` with the Spark package as one unit: its modules share one JVM, S3 server and tiered broker
    (stopped when the package is done: tests/pipeline/conftest.py) instead of one per worker kept to the end."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkPackageTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SPARK_PACKAGE if nodeid.startswith(SPARK_PACKAGE) else super()._split_scope(nodeid)

    return SparkPackageTogether(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for b in list(StrataBroker.live):
            rep.sections.append((f"broker {b.name} ({b.bootstrap}, pid {b.pid}) output tail", b.tail(80)))
        for b in getattr(item, "_strata_brokers", ()):
            if b not in StrataBroker.live and b.output_path.exists():
                rep.sections.append((f"broker {b.name} (stopped) output tail", b.tail(80)))


def _start(tmp: Path, overrides: dict, name: str) -> StrataBroker:
    return StrataBroker(tmp, overrides, name=name).start()


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., StrataBroker]]:
    started: list[StrataBroker] = []
    request.node._strata_brokers = started

    def factory(**overrides: object) -> StrataBroker:
        idx = len(started)
        b = StrataBroker(tmp_path / f"broker{idx}", overrides, name=f"strata{idx}")
        started.append(b)
        return b.start()

    yield factory
    for b in started:
        b.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., StrataBroker]) -> StrataBroker:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    overrides = dict(getattr(request.module, "MODULE_BROKER_OVERRIDES", {}))
    name = request.module.__name__.rsplit(".", 1)[-1]
    b = StrataBroker(tmp_path_factory.mktemp(name), overrides, name=name)
    b.start()
    yield b
    b.stop()
