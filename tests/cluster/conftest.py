"""Cluster tests: real etcd, real broker processes, real clients (see tests/support/cluster_proc.py).

``cluster_factory(size=3, overrides=..., netns=False, ...)`` starts a ``StrataCluster`` in the test's tmp dir; every
cluster is closed (brokers, etcd, network namespaces: by PID / by name) at teardown. A failing test's report shows
the output tail of every broker of its clusters (running or not) and of etcd.

A test (or one parametrization of it, `pytest.param(..., marks=pytest.mark.cluster_profile("sasl_ssl_tiered"))`)
marked `cluster_profile(name)` gets clusters of that profile from `cluster_factory`, with its body unchanged:
`sasl_ssl_tiered` secures every listener with SASL_SSL (TLS + PLAIN between brokers and for the test's clients) and
tiers every topic the test creates to LocalTieredStorage, with small segments deleted locally once copied.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

from tests.support.certs import make_pki
from tests.support.client_security import ClientSecurity
from tests.support.cluster_proc import StrataCluster
from tests.support.s3_servers import MotoServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster_profile(name): cluster_factory builds clusters of that profile")


_BROKER_PW = "broker-pw-5c1e"  # test-only credentials, never logged by the broker
_CLIENT_PW = "client-pw-8a7d"
_PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="broker" password="{_BROKER_PW}" user_broker="{_BROKER_PW}" user_client="{_CLIENT_PW}";'
)


def sasl_ssl_tiered(tmp: Path) -> dict[str, Any]:
    """StrataCluster arguments: INTERNAL and EXTERNAL listeners both SASL_SSL (PLAIN; brokers authenticate to each
    other as `broker`, the test's clients as `client`), LocalTieredStorage shared by the brokers, and every created
    topic tiered with 16 KiB segments that local retention deletes once they are copied."""
    pki = make_pki(tmp / "pki")
    overrides = {
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.dir / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_pem),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.jaas.config": _PLAIN_JAAS,
        "remote.log.storage.system.enable": True,
        "remote.log.storage.manager.class.name": "local",
        "rsm.config.dir": str(tmp / "remote"),
        "remote.log.manager.task.interval.ms": 200,
        "remote.log.metadata.topic.num.partitions": 3,
        "log.retention.check.interval.ms": 200,
        "log.segment.delete.delay.ms": 0,
        "replica.fetch.backoff.ms": 100,
    }
    return {
        "overrides": overrides,
        "split_listeners": True,
        "security": ClientSecurity(pki.ca_pem, "client", _CLIENT_PW),
        "topic_config": {"remote.storage.enable": True, "segment.bytes": 16384, "local.retention.bytes": 1},
    }


PROFILES: dict[str, Callable[[Path], dict[str, Any]]] = {"sasl_ssl_tiered": sasl_ssl_tiered}


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
    marker = request.node.get_closest_marker("cluster_profile")

    def factory(size: int = 3, **kw: Any) -> StrataCluster:
        if marker is not None:
            profile = PROFILES[marker.args[0]](tmp_path / f"profile{len(clusters)}")
            kw = {**profile, **kw, "overrides": {**profile["overrides"], **(kw.get("overrides") or {})}}
        c = StrataCluster(tmp_path / f"cluster{len(clusters)}", size=size, **kw)
        clusters.append(c)
        try:
            c.start()
        finally:
            brokers.extend(c.brokers.values())
        return c

    yield factory
    for c in clusters:
        c.close()
