"""Cluster tests: real etcd, real broker processes, real clients (see tests/support/cluster_proc.py).

``cluster_factory(size=3, overrides=..., netns=False, ...)`` starts a ``StrataCluster`` in the test's tmp dir; every
cluster is closed (brokers, etcd, network namespaces: by PID / by name) at teardown. A failing test's report shows
the output tail of every broker of its clusters (running or not) and of etcd.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pluggy
import pytest

from tests.support.cluster_proc import StrataCluster
from tests.support.s3_servers import MotoServer


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for c in getattr(item, "_strata_clusters", ()):
            if c.etcd is not None:
                rep.sections.append((f"etcd ({c.etcd.url}) output tail", c.etcd.tail(30)))


@pytest.fixture
def queue_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a line (the queue checker's counts) for the end-of-run summary and print it. The line travels as a
    user property of the test's report, so the summary also works with pytest-xdist workers."""

    def report(line: str) -> None:
        request.node.user_properties.append(("cluster-queue", line))
        print(line)

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        v
        for reps in terminalreporter.stats.values()
        for r in reps
        if getattr(r, "when", "") == "call"
        for k, v in getattr(r, "user_properties", ())
        if k == "cluster-queue"
    ]
    if lines:
        terminalreporter.section("cluster queue checker")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto S3 server for the tiered cluster scenarios (each cluster uses a key prefix of its own)."""
    with MotoServer(tmp_path_factory.mktemp("moto-cluster")) as server:
        yield server


@pytest.fixture
def cluster_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., StrataCluster]]:
    clusters: list[StrataCluster] = []
    request.node._strata_clusters = clusters
    brokers = request.node._strata_brokers = []  # stopped brokers' tails in failure reports (tests/conftest.py)

    def factory(size: int = 3, **kw: object) -> StrataCluster:
        c = StrataCluster(tmp_path / f"cluster{len(clusters)}", size=size, **kw)  # type: ignore[arg-type]
        clusters.append(c)
        try:
            c.start()
        finally:
            brokers.extend(c.brokers.values())
        return c

    yield factory
    for c in clusters:
        c.close()
