"""Fixtures for the tiered-storage scenarios: every scenario runs against LocalTieredStorage and against S3 on
moto's server (one moto process per session; each scenario gets its own key prefix in the bucket)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.s3_servers import MotoServer
from tests.tiered.harness import Harness, LocalBackend, RemoteBackend, S3Backend

BACKENDS = ["local", "s3"]


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


def _prefix(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60]
    return f"{name}-{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def make_backend(request: pytest.FixtureRequest, backend_name: str) -> Callable[..., RemoteBackend]:
    def make(endpoint: str | None = None) -> RemoteBackend:
        if backend_name == "local":
            return LocalBackend()
        return S3Backend(request.getfixturevalue("moto_server"), _prefix(request), endpoint=endpoint)

    return make


@pytest.fixture
def make_harness(
    request: pytest.FixtureRequest, tmp_path: Path, make_backend: Callable[..., RemoteBackend]
) -> Iterator[Callable[..., Harness]]:
    """`make_harness(**broker_overrides)` starts a broker with tiered storage on this test's backend."""
    started: list[Harness] = []
    request.node._strata_brokers = []

    def make(backend: RemoteBackend | None = None, **overrides: object) -> Harness:
        h = Harness(tmp_path / f"broker{len(started)}", backend or make_backend(), overrides)
        started.append(h)
        request.node._strata_brokers.append(h.broker)
        return h.start()

    yield make
    for h in started:
        h.stop()


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness()
