"""Fixtures for the S3 end-to-end tiered tests: one moto server per session, and a fault-injecting proxy in front
of it (`s3_faults.ProxyThread`), one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.s3_servers import MotoServer
from tests.tiered_s3.s3_faults import ProxyThread


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with MotoServer(tmp_path_factory.mktemp("moto-tiered-s3")) as server:
        yield server


@pytest.fixture
def s3_proxy(moto: MotoServer) -> Iterator[ProxyThread]:
    with ProxyThread(moto.port) as p:
        yield p
