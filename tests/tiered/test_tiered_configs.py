"""The shipped configurations: `make run`'s config/server.properties turns tiered storage on with
LocalTieredStorage under ./strata-data/kafka-tiered-storage; config/server-s3.properties builds the S3 RSM against a
local endpoint; and a broker started from server-s3.properties (endpoint and bucket pointed at moto) tiers a topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.config import BrokerConfig
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.rsm import create_remote_storage_manager
from strata.remote.s3 import S3RemoteStorageManager
from tests.support.broker_proc import REPO_ROOT
from tests.tiered.harness import Harness, S3Backend, Scenario

pytestmark = [pytest.mark.timeout(120)]


def test_make_run_config_tiers_to_local_directory() -> None:
    cfg = BrokerConfig.load(str(REPO_ROOT / "config" / "server.properties"), [])
    assert cfg["remote.log.storage.system.enable"] is True
    rsm = create_remote_storage_manager(
        cfg["remote.log.storage.manager.class.name"], cfg.prefixed("rsm.config."), default_dir=Path(cfg.log_dirs[0])
    )
    assert isinstance(rsm, LocalTieredStorage)
    assert rsm.root == Path("./strata-data/kafka-tiered-storage")
    # topics opt in: nothing is tiered by default
    assert cfg.log_config({})["remote.storage.enable"] is False


def test_s3_example_config_builds_the_s3_rsm() -> None:
    cfg = BrokerConfig.load(str(REPO_ROOT / "config" / "server-s3.properties"), [])
    assert cfg["remote.log.storage.system.enable"] is True
    rsm = create_remote_storage_manager(cfg["remote.log.storage.manager.class.name"], cfg.prefixed("rsm.config."))
    assert isinstance(rsm, S3RemoteStorageManager)
    c = rsm.config
    assert (c.bucket, c.endpoint_url, c.path_style, c.key_prefix) == (
        "strata-tiered",
        "http://127.0.0.1:9000",
        True,
        "strata/",
    )


@pytest.mark.integration
def test_broker_from_s3_example_config_tiers_a_topic(tmp_path: Path, moto_server) -> None:
    """Every rsm.config.* key of config/server-s3.properties, with only the endpoint, bucket and credentials
    swapped for the test's moto server, drives a real broker."""
    from strata.config.broker_config import parse_properties

    props = parse_properties((REPO_ROOT / "config" / "server-s3.properties").read_text())
    tiered = {k: v for k, v in props.items() if k.startswith(("remote.", "rsm."))}
    backend = S3Backend(moto_server, props["rsm.config.key.prefix"] + "example/")
    h = Harness(tmp_path / "broker", backend, {**tiered, **backend.broker_overrides(tmp_path)})
    with h:
        (
            Scenario("example s3 config")
            .create_topic("t", configs={"local.retention.bytes": "1"})
            .produce("t", 0, 30)
            .wait_for_offload("t", 0, up_to_offset=19)
            .expect_remote_segments("t", 0, [0, 10])
            .expect_earliest_local_offset("t", 0, 20)
            .consume("t", 0, from_offset=0, expect_records=30)
            .expect_fetch_from_remote("t", at_least=2)
            .run(h)
        )
