"""The tiered-storage scenarios of tests/tiered against SeaweedFS (`weed mini`), a second real S3 server besides
moto: offload and consume from offset 0 (raw Fetch and librdkafka), remote retention by DeleteRecords / bytes /
time deleting the remote segments and their objects, and topic deletion emptying the topic's prefix.

The scenario functions are the harness's own, imported unchanged; only the backend differs: tests/tiered's
`make_harness` / `harness` fixtures are reused and this module's `make_backend` gives them an S3 backend on a
SeaweedFS server (one per module, a key prefix per test) instead of LocalTieredStorage or moto. No edit to the
harness or its conftest is needed for that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.s3_servers import SeaweedServer
from tests.tiered import test_tiered_offload as offload
from tests.tiered import test_tiered_retention as retention
from tests.tiered.conftest import harness, make_harness  # noqa: F401 - the harness fixtures, reused
from tests.tiered.harness import RemoteBackend, S3Backend
from tests.tiered_s3.s3_faults import key_prefix

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    with SeaweedServer(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def make_backend(request: pytest.FixtureRequest, seaweedfs: SeaweedServer) -> Callable[..., RemoteBackend]:
    def make(endpoint: str | None = None) -> RemoteBackend:
        return S3Backend(seaweedfs, key_prefix(request), endpoint=endpoint)

    return make


# offload + consume from 0 (wire and librdkafka), mid-batch, across the remote/local boundary
test_offload_and_consume_from_leader = offload.test_offload_and_consume_from_leader
# remote retention deleting remote segments and their objects; topic deletion emptying its prefix
test_delete_records_moves_log_start_and_deletes_remote_segments = (
    retention.test_delete_records_moves_log_start_and_deletes_remote_segments
)
test_remote_retention_by_bytes = retention.test_remote_retention_by_bytes
test_remote_retention_by_time = retention.test_remote_retention_by_time
test_topic_deletion_empties_remote_storage = retention.test_topic_deletion_empties_remote_storage
