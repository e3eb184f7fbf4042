"""The `strata` commands that need a cluster, run as a user runs them against three brokers on etcd: `groups list`
sees the groups of every coordinator, `leader-election` moves leadership back to the preferred replica,
`reassign-partitions` generate/execute/verify moves a replica to another broker (data still readable), `log-dirs`
and `broker-api-versions` ask every broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.cli.groups import GroupAdmin
from tests.support import ck
from tests.support.cli_run import fails, ok, strata
from tests.support.cluster_proc import StrataCluster
from tests.support.records import Rec
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataCluster]:
    # no automatic preferred-leader rebalance: leader-election must be what moves leadership back
    c = StrataCluster(tmp_path_factory.mktemp("cli"), 3, overrides={"auto.leader.rebalance.enable": False})
    c.start()
    yield c
    c.close()


def test_groups_list_merges_every_coordinator(cluster: StrataCluster) -> None:
    c = cluster
    c.create_topic("cl-g", 1, 3)
    one = c.broker(1).bootstrap
    ids = [f"cl-grp-{i}" for i in range(12)]
    for g in ids:  # an admin commit creates each group on its coordinator
        ok(
            strata(
                "groups",
                "--bootstrap-server",
                one,
                "reset-offsets",
                "--group",
                g,
                "--topic",
                "cl-g",
                "--to-earliest",
                "--execute",
            )
        )
    with GroupAdmin(one, timeout=30) as a:
        coordinators = {a.find_coordinator(g)[0] for g in ids}
    assert len(coordinators) >= 2, coordinators  # the groups live on several brokers: the point of the test
    listed = ok(strata("groups", "--bootstrap-server", one, "list")).split()
    assert sorted(g for g in listed if g.startswith("cl-grp-")) == sorted(ids)
    # with TYPE and STATE columns and a filter, still every coordinator's groups (ListGroups v5 to each broker)
    rows = [
        r.split()
        for r in ok(strata("groups", "--bootstrap-server", one, "list", "--type", "--state", "empty")).splitlines()
    ]
    assert rows[0] == ["GROUP", "TYPE", "STATE"]
    assert sorted(r for r in rows[1:] if r[0].startswith("cl-grp-")) == [[g, "Classic", "Empty"] for g in sorted(ids)]


def test_leader_election_restores_the_preferred_leader(cluster: StrataCluster, tmp_path: Path) -> None:
    c = cluster
    c.create_topic("cl-el", 1, 3)
    preferred = c.replicas_of("cl-el", 0)[0]
    assert c.leader_of("cl-el", 0) == preferred
    c.restart(preferred)  # leadership moves away while it is down and stays away (no auto rebalance)
    c.wait_isr("cl-el", 0)
    assert c.leader_of("cl-el", 0) != preferred
    run = ("leader-election", "--bootstrap-server", c.bootstrap, "--election-type", "preferred")
    out = ok(strata(*run, "--topic", "cl-el", "--partition", "0"))
    assert out.splitlines() == ["Successfully completed leader election (PREFERRED) for partitions cl-el-0"]
    c.wait_leader("cl-el", 0, among=[preferred])
    out = ok(strata(*run, "--topic", "cl-el", "--partition", "0"))
    assert out.splitlines() == ["Valid replica already elected for partitions cl-el-0"]
    spec = tmp_path / "elect.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "cl-el", "partition": 0}]}))
    out = ok(strata(*run, "--path-to-json-file", str(spec)))
    assert out.splitlines() == ["Valid replica already elected for partitions cl-el-0"]

    c.restart(preferred)  # again, then every partition that needs it at once
    c.wait_isr("cl-el", 0)
    assert c.leader_of("cl-el", 0) != preferred
    first = ok(strata(*run, "--all-topic-partitions")).splitlines()[0]
    assert first.startswith("Successfully completed leader election (PREFERRED) for partitions ")
    assert "cl-el-0" in first.split("partitions ", 1)[1].split(", ")
    c.wait_leader("cl-el", 0, among=[preferred])
    assert fails(strata(*run, "--partition", "0"), 1).endswith(
        "exactly one of --topic, --path-to-json-file or --all-topic-partitions is required"
    )


def test_reassign_generate_execute_verify(cluster: StrataCluster, tmp_path: Path) -> None:
    c = cluster
    c.create_topic("cl-ra", 2, 1)
    ck.produce_all(c.bootstrap, "cl-ra", [Rec(p, None, b"r%d" % i) for p in (0, 1) for i in range(20)])
    bs = c.bootstrap
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"topics": [{"topic": "cl-ra"}], "version": 1}))
    out = ok(
        strata(
            "reassign-partitions",
            "--bootstrap-server",
            bs,
            "generate",
            "--topics-to-move-json-file",
            str(move),
            "--broker-list",
            "1,2,3",
        )
    ).splitlines()
    assert (
        out[0] == "Current partition replica assignment" and out[3] == "Proposed partition reassignment configuration"
    )
    current, proposed = json.loads(out[1]), json.loads(out[4])
    assert [(p["topic"], p["partition"], p["log_dirs"]) for p in current["partitions"]] == [
        ("cl-ra", 0, ["any"]),
        ("cl-ra", 1, ["any"]),
    ]
    assert [len(p["replicas"]) for p in proposed["partitions"]] == [1, 1]

    old = c.replicas_of("cl-ra", 0)[0]
    new = next(i for i in c.ids if i != old)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "cl-ra", "partition": 0, "replicas": [new]}]}))
    run = ("reassign-partitions", "--bootstrap-server", bs)
    out = ok(strata(*run, "execute", "--reassignment-json-file", str(plan))).splitlines()
    assert out[0] == "Current partition replica assignment"
    assert json.loads(out[2])["partitions"][0]["replicas"] == [old]
    assert out[-1] == "Successfully started partition reassignment for cl-ra-0"

    def completed() -> bool:
        r = ok(strata(*run, "verify", "--reassignment-json-file", str(plan)))
        return r.splitlines() == [
            "Status of partition reassignment:",
            "Reassignment of partition cl-ra-0 is completed.",
        ]

    wait_until(completed, 60, interval=0.5, message="reassignment of cl-ra-0 completed")
    assert c.replicas_of("cl-ra", 0) == [new]
    assert [r.value for r in ck.read_partition(bs, "cl-ra", 0, 0, 20)] == [b"r%d" % i for i in range(20)]
    assert ok(strata(*run, "list")).strip() == "No partition reassignments found."

    plan.write_text(json.dumps({"partitions": [{"topic": "cl-ra", "partition": 0, "replicas": [9]}]}))
    assert fails(strata(*run, "execute", "--reassignment-json-file", str(plan)), 1).endswith("Unknown broker id(s): 9")


def test_log_dirs_and_api_versions_ask_every_broker(cluster: StrataCluster) -> None:
    c = cluster
    c.create_topic("cl-ld", 1, 2)
    holders = set(c.replicas_of("cl-ld", 0))
    out = ok(strata("log-dirs", "--bootstrap-server", c.broker(1).bootstrap, "describe", "--topic-list", "cl-ld"))
    lines = out.splitlines()
    assert lines[1] == "Received log directory information from brokers 1,2,3"
    doc = json.loads(lines[2])
    found = {
        br["broker"]
        for br in doc["brokers"]
        for d in br["logDirs"]
        for p in d["partitions"]
        if p["partition"] == "cl-ld-0"
    }
    assert found == holders

    out = ok(strata("broker-api-versions", "--bootstrap-server", c.broker(2).bootstrap))
    heads = [line for line in out.splitlines() if line.endswith(" -> (")]
    assert [h.split(" (id: ")[1].split(" ")[0] for h in heads] == ["1", "2", "3"]
