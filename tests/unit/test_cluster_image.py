"""MetadataImage: key parsing, per-key revision ordering (a late or duplicate change never undoes a newer one),
notifications, and the diff a full re-read produces."""

from __future__ import annotations

import json
import uuid

from strata.broker.cluster.image import MetadataImage, topic_from_json, topic_to_json
from strata.broker.cluster.model import BrokerInfo, PartitionState
from strata.broker.metadata_store import TopicInfo


def j(o) -> bytes:
    return json.dumps(o).encode()


TID = uuid.uuid4()
TOPIC = {"topic_id": str(TID), "assignments": [[1, 2], [2, 1]], "configs": {"retention.ms": "1"}, "internal": False}


def test_apply_parses_every_key_kind_and_notifies():
    img = MetadataImage()
    b = BrokerInfo(1, {"PLAINTEXT": ("h", 9092)}, "r1", "inc")
    assert img.apply("brokers/1", j({**b.to_json(), "lease": 7}), 2) == [("broker", 1)]
    assert img.brokers[1] == b and img.broker_leases[1] == 7
    assert img.apply("topics/a.b-c", j(TOPIC), 3) == [("topic", "a.b-c")]
    info = img.topics["a.b-c"]
    assert (info.partitions, info.assignments, info.replicas(1)) == (2, [[1, 2], [2, 1]], [2, 1])
    assert img.by_id[TID] is info
    s = PartitionState(1, 0, (1, 2), (1, 2), 0)
    assert img.apply("partitions/a.b-c/1", j(s.to_json()), 4) == [("partition", ("a.b-c", 1))]
    assert img.partitions[("a.b-c", 1)] == s
    assert img.apply("controller", j({"broker_id": 1, "epoch": 3}), 5) == [("controller", 1)]
    assert img.apply("controller_epoch", j(3), 5) == []
    assert img.controller.epoch == 3 and img.controller_epoch == 3
    assert img.apply("shutdown/1", j({"done": False}), 6) == [("broker", 1)]
    assert img.mod_revision("partitions/a.b-c/1") == 4
    assert img.mod_revision("partitions/a.b-c/0") == 0
    assert img.revision == 6


def test_older_or_duplicate_changes_are_ignored():
    img = MetadataImage()
    s1 = PartitionState(1, 0, (1, 2), (1, 2), 0)
    s2 = s1.with_changes(isr=(1,))
    img.apply("partitions/t/0", j(s2.to_json()), 10)
    assert img.apply("partitions/t/0", j(s1.to_json()), 8) == []  # a late read of an older value
    assert img.apply("partitions/t/0", j(s2.to_json()), 10) == []  # the watch echo of our own write
    assert img.partitions[("t", 0)] == s2
    img.apply("partitions/t/0", None, 12)
    assert ("t", 0) not in img.partitions
    assert img.apply("partitions/t/0", j(s2.to_json()), 11) == []  # deleted at 12: an 11 put is stale
    assert img.mod_revision("partitions/t/0") == 0


def test_topic_deletion_remembers_the_deleted_info():
    img = MetadataImage()
    img.apply("topics/t", j(TOPIC), 2)
    img.apply("topics/t", None, 3)
    assert "t" not in img.topics and TID not in img.by_id
    assert img.deleted_topics["t"].topic_id == TID


def test_diff_after_reread():
    old = MetadataImage()
    old.apply("brokers/1", j(BrokerInfo(1, {}).to_json()), 2)
    old.apply("brokers/2", j(BrokerInfo(2, {}).to_json()), 2)
    old.apply("topics/t", j(TOPIC), 3)
    old.apply("partitions/t/0", j(PartitionState(1, 0, (1, 2), (1, 2)).to_json()), 3)
    new = MetadataImage.from_kvs(
        [
            ("brokers/1", j(BrokerInfo(1, {}).to_json()), 2),
            ("topics/u", j(TOPIC), 9),
            ("controller", j({"broker_id": 1, "epoch": 1}), 9),
        ],
        10,
    )
    changes = new.diff(old)
    assert ("broker", 2) in changes and ("broker", 1) not in changes
    assert ("topic", "t") in changes and ("topic", "u") in changes
    assert ("partition", ("t", 0)) in changes
    assert ("controller", 1) in changes
    assert new.deleted_topics["t"].topic_id == TID
    assert new.revision == 10


def test_topic_json_round_trip():
    info = TopicInfo("t", TID, 2, {"a": "b"}, True, [[1], [2]])
    assert topic_from_json("t", topic_to_json(info)) == info
