"""`strata get-offsets`, `delete-records`, `log-dirs describe` and `broker-api-versions` (kafka-get-offsets.sh,
kafka-delete-records.sh, kafka-log-dirs.sh, kafka-broker-api-versions.sh) run against a live broker: Kafka's
output lines, the effect on the log (checked with confluent-kafka's watermarks), one-line errors."""

from __future__ import annotations

import json

import pytest

from strata.cli.broker_api_versions import api_lines
from tests.support import ck
from tests.support.cli_run import fails, ok, strata
from tests.support.records import Rec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BASE_TS = 1_700_000_200_000


@pytest.fixture(scope="module")
def filled(module_broker):
    """Topic `off-a`: 3 partitions holding 5, 3 and 0 records (timestamps BASE_TS + i s)."""
    b = module_broker
    ck.create_topic(b.bootstrap, "off-a", 3)
    recs = [Rec(0, None, b"a%d" % i, (), BASE_TS + i * 1000) for i in range(5)]
    recs += [Rec(1, None, b"b%d" % i, (), BASE_TS + i * 1000) for i in range(3)]
    ck.produce_all(b.bootstrap, "off-a", recs)
    return b


def get_offsets(b, *args: str):
    return strata("get-offsets", "--bootstrap-server", b.bootstrap, *args)


def test_get_offsets(filled):
    b = filled
    assert ok(get_offsets(b, "--topic", "off-a")).splitlines() == ["off-a:0:5", "off-a:1:3", "off-a:2:0"]
    assert ok(get_offsets(b, "--topic", "off-.", "--time", "earliest", "--partitions", "0,2")).splitlines() == [
        "off-a:0:0",
        "off-a:2:0",
    ]
    # by timestamp: the first offset at or after it; a partition without such a record is left out
    out = ok(get_offsets(b, "--topic-partitions", "off-a:0-2", "--time", str(BASE_TS + 2500)))
    assert out.splitlines() == ["off-a:0:3"]
    assert ok(get_offsets(b, "--topic-partitions", "off-a:1", "--time", "-3")).splitlines() == ["off-a:1:2"]
    assert fails(get_offsets(b, "--topic", "nope-.*")) == (
        "Error occurred: Could not match any topic-partitions with the specified filters"
    )
    assert "Malformed time argument soon" in fails(get_offsets(b, "--time", "soon"))
    assert "cannot be used with --topic" in fails(get_offsets(b, "--topic", "x", "--topic-partitions", "x:1"))


def test_delete_records(filled, tmp_path):
    b = filled
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "off-a", "partition": 0, "offset": 2},
                    {"topic": "off-a", "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    out = ok(strata("delete-records", "--bootstrap-server", b.bootstrap, "--offset-json-file", str(spec)))
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: off-a-0\tlow_watermark: 2",
        "partition: off-a-1\tlow_watermark: 3",
    ]
    assert ck.watermarks(b.bootstrap, "off-a", 0) == (2, 5)
    assert ck.watermarks(b.bootstrap, "off-a", 1) == (3, 3)
    # a partition that does not exist fails alone; the others are still done
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "off-a", "partition": 0, "offset": 3},
                    {"topic": "off-a", "partition": 7, "offset": 1},
                ]
            }
        )
    )
    r = strata("delete-records", "--bootstrap-server", b.bootstrap, "--offset-json-file", str(spec))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stdout.splitlines()
    assert lines[2] == "partition: off-a-0\tlow_watermark: 3"
    assert lines[3].startswith("partition: off-a-7\terror: ") and "UNKNOWN_TOPIC_OR_PARTITION" in lines[3]
    spec.write_text("{not json")
    err = fails(strata("delete-records", "--bootstrap-server", b.bootstrap, "--offset-json-file", str(spec)), 1)
    assert err.startswith("strata delete-records: error: the offset JSON file is not JSON")


def test_log_dirs_describe(filled):
    b = filled
    out = ok(strata("log-dirs", "--bootstrap-server", b.bootstrap, "describe", "--topic-list", "off-a"))
    lines = out.splitlines()
    assert lines[:2] == [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 0",
    ]
    doc = json.loads(lines[2])
    assert doc["version"] == 1 and [br["broker"] for br in doc["brokers"]] == [0]
    (log_dir,) = doc["brokers"][0]["logDirs"]
    assert log_dir["error"] is None and log_dir["logDir"]
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(parts) == ["off-a-0", "off-a-1", "off-a-2"]
    assert parts["off-a-2"]["size"] == 0 and parts["off-a-0"]["size"] > 0 and parts["off-a-0"]["offsetLag"] == 0
    err = fails(strata("log-dirs", "--bootstrap-server", b.bootstrap, "describe", "--broker-list", "0,5"), 1)
    assert err.endswith("ERROR: The given brokers do not exist from --broker-list: 5. Current existent brokers: 0")


def test_broker_api_versions(module_broker):
    b = module_broker
    lines = ok(strata("broker-api-versions", "--bootstrap-server", b.bootstrap)).splitlines()
    assert lines[0] == f"{b.bootstrap} (id: 0 rack: null) -> ("
    body = [line.strip().rstrip(",") for line in lines[1:-1]]
    assert lines[-1] == ")"
    assert "Produce(0): 0 to 13 [usable: 13]" in body
    assert "ApiVersions(18): 0 to 4 [usable: 4]" in body
    assert "SaslHandshake(17): 0 to 1 [usable: 1]" in body
    assert "CreateAcls(30): 1 to 3 [usable: 3]" in body
    assert "EndTxn(26): 0 to 4 [usable: 4]" in body
    assert "Fetch(1): UNSUPPORTED" in api_lines({0: (0, 13)})  # an API the broker lacks, as Kafka's tool prints it
    err = fails(strata("broker-api-versions", "--bootstrap-server", "127.0.0.1:1", "--timeout", "5"), 1)
    assert "connection refused by 127.0.0.1:1" in err
