"""Forwarded admin requests are authorized as the client, as Kafka's Envelope (KIP-590) makes its controller do.

A 3-broker cluster with the StandardAuthorizer; brokers talk over INTERNAL (SASL_PLAINTEXT, PLAIN user `broker`,
a super user), which clients use too. alice may create topics prefixed `alice-` only. Her CreateTopics sent to a
broker that is not the controller is forwarded on that broker's own (super user) connection: the controller must
still refuse `other-*` and accept `alice-*`. A client that writes the forwarding marker itself, claiming to act for
the super user `admin`, is not believed (it lacks CLUSTER_ACTION), so its request is still judged as its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster_proc import StrataCluster
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CREATE_TOPICS, CREATE_ACLS = 19, 30
TOPIC_AUTH = 29
USERS = {"broker": "broker-pw-9", "admin": "admin-pw-8", "alice": "alice-pw-7"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + 'username="broker" password="broker-pw-9" '
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


def create(c: WireClient, name: str) -> Any:
    t = {"name": name, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}
    return c.call(CREATE_TOPICS, 7, topics=[t], timeout_ms=20000, validate_only=False).topics[0]


def test_forwarded_create_topics_is_authorized_as_the_client(tmp_path: Path) -> None:
    overrides = {
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
    }
    with StrataCluster(tmp_path / "cluster", size=3, overrides=overrides, split_listeners=True) as cluster:
        controller = cluster.metadata([]).controller_id
        other = next(i for i in cluster.ids if i != controller)

        def login(i: int, user: str, client_id: str = "acl-fwd") -> WireClient:
            b = cluster.broker(i)
            assert b.internal_port is not None
            c = WireClient(b.host, b.internal_port, client_id=client_id)
            c.sasl_plain(user, USERS[user])
            return c

        with login(other, "admin") as admin:
            grant = {
                "resource_type": 2,  # TOPIC
                "resource_name": "alice-",
                "resource_pattern_type": 4,  # PREFIXED
                "principal": "User:alice",
                "host": "*",
                "operation": 5,  # CREATE
                "permission_type": 3,  # ALLOW
            }
            assert [r.error_code for r in admin.call(CREATE_ACLS, 3, creations=[grant]).results] == [0]

        with login(other, "alice") as alice:
            # the ACL reaches the controller through etcd; until then alice's own topic is refused too
            wait_until(lambda: create(alice, "alice-fwd").error_code == 0, 20, message="alice-fwd never created")
            denied = create(alice, "other-fwd")
            assert (denied.error_code, denied.error_message) == (TOPIC_AUTH, "Authorization failed.")

        assert {t.name for t in cluster.metadata(None).topics} == set()  # ANONYMOUS (EXTERNAL) sees nothing

        # a client's own marker claiming the super user is ignored: it is alice who asks
        forged = "strata-forwarded-by-" + str(other) + "/User%3Aadmin/127.0.0.1%3A1:forged"
        with login(controller, "alice", client_id=forged) as mallory:
            assert create(mallory, "other-forged").error_code == TOPIC_AUTH

        with login(other, "admin") as admin:
            names = {t.name for t in admin.metadata(None).topics}
        assert "alice-fwd" in names and "other-fwd" not in names and "other-forged" not in names
        for i in cluster.ids:
            assert "Traceback" not in cluster.broker(i).output(), cluster.broker(i).tail()
