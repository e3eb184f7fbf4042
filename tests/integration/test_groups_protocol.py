"""Group APIs on the wire, every advertised version, against a real broker process (raw sockets, kafka-python's
codec): FindCoordinator 0-6 (single and batched keys, transaction keys), JoinGroup 0-9 / SyncGroup 0-5 /
Heartbeat 0-4 / LeaveGroup 0-5 (two-step join from v4, generations from 1, rebalance via REBALANCE_IN_PROGRESS),
OffsetCommit 2-9 x OffsetFetch 1-9 (all-partitions and multi-group forms), v10 of both by topic id, ListGroups 0-5
filters, DescribeGroups 0-6, DeleteGroups 0-2, OffsetDelete 0, and offsets + group state across kill -9 and restart.
"""

from __future__ import annotations

import itertools
import socket
import struct
import uuid
from typing import Any

import pytest

from strata.protocol import consumer_protocol as cp
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, SUPPORTED_VERSIONS
from tests.support import ck
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, DELETE, COMMIT, FETCH, OFFSET_DELETE = (
    10,
    11,
    12,
    13,
    14,
    15,
    16,
    42,
    8,
    9,
    47,
)
NONE, UNKNOWN_TOPIC, COORD_NA, ILLEGAL_GEN, UNKNOWN_MEMBER, REBALANCING, INVALID_REQUEST = 0, 3, 15, 22, 25, 27, 42
NON_EMPTY, GROUP_NOT_FOUND, MEMBER_ID_REQUIRED, SUBSCRIBED = 68, 69, 79, 86
SUB = cp.encode_subscription(["t"])


class Wire:
    """One connection; send() and recv() are separate so a JoinGroup can stay parked while others talk."""

    def __init__(self, bootstrap: str, client_id: str = "wire") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.client_id = client_id
        self._corr = itertools.count(1)
        self._pending: list[tuple[int, int, int]] = []

    def send(self, api_key: int, version: int, **fields: Any) -> None:
        corr = next(self._corr)
        req = REQUEST_CLASSES[api_key](version=version, **fields)
        req.with_header(correlation_id=corr, client_id=self.client_id)
        self.sock.sendall(bytes(req.encode(header=True, framed=True)))
        self._pending.append((corr, api_key, version))

    def recv(self) -> Any:
        corr, api_key, version = self._pending.pop(0)
        size = struct.unpack(">i", self._read(4))[0]
        payload = self._read(size)
        resp = RESPONSE_CLASSES[api_key].decode(payload, version=version, header=True)
        assert resp.header.correlation_id == corr
        return resp

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self.send(api_key, version, **fields)
        return self.recv()

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "broker closed the connection"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def find_coordinator(bootstrap: str) -> None:
    """What every client does first; it also creates __consumer_offsets (Kafka does the same)."""
    w = Wire(bootstrap)
    assert w.call(FIND_COORDINATOR, 0, key="any").error_code == 0
    w.close()


@pytest.fixture(scope="module")
def bs(module_broker):
    ck.create_topic(module_broker.bootstrap, "t", 3)
    find_coordinator(module_broker.bootstrap)
    return module_broker.bootstrap


@pytest.fixture
def wire(bs):
    conns: list[Wire] = []

    def make(client_id: str = "wire") -> Wire:
        conns.append(Wire(bs, client_id))
        return conns[-1]

    yield make
    for c in conns:
        c.close()


# -- FindCoordinator --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("v", range(7))
def test_find_coordinator(module_broker, bs, wire, v):
    w = wire()
    port = module_broker.port
    if v >= 4:
        r = w.call(FIND_COORDINATOR, v, key_type=0, coordinator_keys=["a", "b"])
        assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
            ("a", 0, 0, "127.0.0.1", port),
            ("b", 0, 0, "127.0.0.1", port),
        ]
        # the transaction coordinator: COORDINATOR_NOT_AVAILABLE at most while __transaction_state is created
        c = wait_until(
            lambda: next(
                (
                    c
                    for c in w.call(FIND_COORDINATOR, v, key_type=1, coordinator_keys=["txn"]).coordinators
                    if c.error_code != COORD_NA
                ),
                None,
            ),
            timeout=30,
        )
        assert (c.key, c.error_code, c.node_id, c.port) == ("txn", 0, 0, port)
        if v >= 6:
            assert (
                w.call(FIND_COORDINATOR, v, key_type=2, coordinator_keys=["s"]).coordinators[0].error_code
                == INVALID_REQUEST
            )
        return
    fields = {"key": "a"} if v == 0 else {"key": "a", "key_type": 0}
    r = w.call(FIND_COORDINATOR, v, **fields)
    assert (r.error_code, r.node_id, r.host, r.port) == (0, 0, "127.0.0.1", port)
    if v >= 1:
        r = wait_until(
            lambda: (lambda r: r if r.error_code != COORD_NA else None)(
                w.call(FIND_COORDINATOR, v, key="txn", key_type=1)
            ),
            timeout=30,
        )
        assert (r.error_code, r.node_id, r.port) == (0, 0, port)


def test_offsets_topic_is_internal_and_compacted(bs, wire):
    wire().call(FIND_COORDINATOR, 0, key="x")
    r = wire().call(
        3,
        12,
        topics=[REQUEST_CLASSES[3].MetadataRequestTopic(name="__consumer_offsets")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    t = r.topics[0]
    assert (t.error_code, t.is_internal, len(t.partitions)) == (0, True, 50)
    from strata.cli.admin_client import RESOURCE_TOPIC, AdminClient

    with AdminClient(bs) as a:
        cfg = {c.name: c.value for c in a.describe_configs(RESOURCE_TOPIC, "__consumer_offsets")}
    assert cfg["cleanup.policy"] == "compact"


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup at every version ---------------------------------------------------
def join_fields(v: int, group: str, member_id: str, instance: str | None = None, session: int = 10000) -> dict:
    Req = REQUEST_CLASSES[JOIN]
    f: dict[str, Any] = {
        "group_id": group,
        "session_timeout_ms": session,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [Req.JoinGroupRequestProtocol(name="range", metadata=SUB)],
    }
    if v >= 1:
        f["rebalance_timeout_ms"] = 10000
    if v >= 5:
        f["group_instance_id"] = instance
    if v >= 8:
        f["reason"] = None
    return f


def join(w: Wire, v: int, group: str, member_id: str = "") -> Any:
    r = w.call(JOIN, v, **join_fields(v, group, member_id))
    if v >= 4 and member_id == "":
        assert r.error_code == MEMBER_ID_REQUIRED and r.member_id and r.generation_id == -1
        r = w.call(JOIN, v, **join_fields(v, group, r.member_id))
    return r


def sync_fields(v: int, group: str, gen: int, member: str, assignments: list[tuple[str, bytes]]) -> dict:
    A = REQUEST_CLASSES[SYNC].SyncGroupRequestAssignment
    f: dict[str, Any] = {
        "group_id": group,
        "generation_id": gen,
        "member_id": member,
        "assignments": [A(member_id=m, assignment=a) for m, a in assignments],
    }
    if v >= 3:
        f["group_instance_id"] = None
    if v >= 5:
        f["protocol_type"] = "consumer"
        f["protocol_name"] = "range"
    return f


def hb_fields(v: int, group: str, gen: int, member: str) -> dict:
    f: dict[str, Any] = {"group_id": group, "generation_id": gen, "member_id": member}
    if v >= 3:
        f["group_instance_id"] = None
    return f


def leave(w: Wire, v: int, group: str, member: str) -> int:
    if v < 3:
        return w.call(LEAVE, v, group_id=group, member_id=member).error_code
    M = REQUEST_CLASSES[LEAVE].MemberIdentity
    r = w.call(LEAVE, v, group_id=group, members=[M(member_id=member, group_instance_id=None)])
    assert r.error_code == 0 and [m.member_id for m in r.members] == [member]
    return r.members[0].error_code


@pytest.mark.parametrize("v", range(10))
def test_group_lifecycle_at_join_version(bs, wire, v):
    sv, hv, lv = min(v, 5), min(v, 4), min(v, 5)
    group = f"life-{v}"
    a, b = wire("client-a"), wire("client-b")
    ja = join(a, v, group)
    assert (ja.error_code, ja.generation_id, ja.leader, ja.protocol_name) == (0, 1, ja.member_id, "range")
    assert ja.member_id.startswith("client-a-")
    assert [(m.member_id, bytes(m.metadata)) for m in ja.members] == [(ja.member_id, SUB)]
    if v >= 7:
        assert ja.protocol_type == "consumer"
    asg = cp.encode_assignment([("t", [0, 1, 2])])
    s = a.call(SYNC, sv, **sync_fields(sv, group, 1, ja.member_id, [(ja.member_id, asg)]))
    assert (s.error_code, bytes(s.assignment)) == (0, asg)
    if sv >= 5:
        assert (s.protocol_type, s.protocol_name) == ("consumer", "range")
    assert a.call(HEARTBEAT, hv, **hb_fields(hv, group, 1, ja.member_id)).error_code == 0
    assert a.call(HEARTBEAT, hv, **hb_fields(hv, group, 0, ja.member_id)).error_code == ILLEGAL_GEN

    # b joins: a's heartbeat says REBALANCE_IN_PROGRESS, a rejoins, both land in generation 2
    if v >= 4:
        r = b.call(JOIN, v, **join_fields(v, group, ""))
        assert r.error_code == MEMBER_ID_REQUIRED
        b.send(JOIN, v, **join_fields(v, group, r.member_id))
    else:
        b.send(JOIN, v, **join_fields(v, group, ""))
    wait_until(
        lambda: a.call(HEARTBEAT, hv, **hb_fields(hv, group, 1, ja.member_id)).error_code == REBALANCING, timeout=10
    )
    ja2 = a.call(JOIN, v, **join_fields(v, group, ja.member_id))
    jb = b.recv()
    assert (ja2.error_code, jb.error_code, ja2.generation_id, jb.generation_id) == (0, 0, 2, 2)
    assert ja2.leader == jb.leader == ja.member_id
    assert sorted(m.member_id for m in ja2.members) == sorted([ja.member_id, jb.member_id]) and jb.members == []
    asg_a, asg_b = cp.encode_assignment([("t", [0, 1])]), cp.encode_assignment([("t", [2])])
    b.send(SYNC, sv, **sync_fields(sv, group, 2, jb.member_id, []))
    sa = a.call(SYNC, sv, **sync_fields(sv, group, 2, ja.member_id, [(ja.member_id, asg_a), (jb.member_id, asg_b)]))
    sb = b.recv()
    assert (sa.error_code, bytes(sa.assignment), sb.error_code, bytes(sb.assignment)) == (0, asg_a, 0, asg_b)

    # DescribeGroups sees both members with their assignments
    d = a.call(DESCRIBE, 5, groups=[group], include_authorized_operations=False).groups[0]
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert {m.member_id: (m.client_id, m.client_host, bytes(m.member_assignment)) for m in d.members} == {
        ja.member_id: ("client-a", "/127.0.0.1", asg_a),
        jb.member_id: ("client-b", "/127.0.0.1", asg_b),
    }

    # both leave: b first (a rebalance starts), then a; the group ends Empty
    assert leave(b, lv, group, jb.member_id) == 0
    assert leave(a, lv, group, ja.member_id) == 0
    assert leave(a, lv, group, "ghost") == UNKNOWN_MEMBER
    d = a.call(DESCRIBE, 5, groups=[group], include_authorized_operations=False).groups[0]
    assert (d.group_state, d.members) == ("Empty", [])


# -- offsets -------------------------------------------------------------------------------------------------------
def commit(
    w: Wire,
    v: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    gen: int = -1,
    member: str = "",
    metadata: str = "m",
) -> dict[tuple[str, int], int]:
    Req = REQUEST_CLASSES[COMMIT]
    T = Req.OffsetCommitRequestTopic
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(
            T.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=7, committed_metadata=metadata
            )
        )
    f: dict[str, Any] = {
        "group_id": group,
        "generation_id_or_member_epoch": gen,
        "member_id": member,
        "topics": [T(name=t, partitions=ps) for t, ps in by_topic.items()],
    }
    if 2 <= v <= 4:
        f["retention_time_ms"] = -1
    if v >= 7:
        f["group_instance_id"] = None
    r = w.call(COMMIT, v, **f)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetch(w: Wire, v: int, group: str, topics: dict[str, list[int]] | None) -> tuple[int, dict]:
    Req = REQUEST_CLASSES[FETCH]
    if v >= 8:
        G = Req.OffsetFetchRequestGroup
        req_topics = (
            None
            if topics is None
            else [G.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics.items()]
        )
        r = w.call(
            FETCH,
            v,
            groups=[G(group_id=group, topics=req_topics, member_id=None, member_epoch=-1)],
            require_stable=False,
        )
        g = r.groups[0]
        return g.error_code, {
            (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
            for t in g.topics
            for p in t.partitions
        }
    T = Req.OffsetFetchRequestTopic
    fields: dict[str, Any] = {
        "group_id": group,
        "topics": None if topics is None else [T(name=t, partition_indexes=ps) for t, ps in topics.items()],
    }
    if v >= 7:
        fields["require_stable"] = False
    r = w.call(FETCH, v, **fields)
    err = r.error_code if v >= 2 else 0
    return err, {
        (t.name, p.partition_index): (
            p.committed_offset,
            p.committed_leader_epoch if v >= 5 else -1,
            p.metadata,
            p.error_code,
        )
        for t in r.topics
        for p in t.partitions
    }


@pytest.mark.parametrize("cv", range(2, 10))
def test_offset_commit_then_fetch_at_every_version(bs, wire, cv):
    w = wire()
    group = f"offsets-{cv}"
    assert commit(w, cv, group, {("t", 0): 11, ("t", 2): 22}) == {("t", 0): 0, ("t", 2): 0}
    assert commit(w, cv, group, {("no-such-topic", 0): 1}) == {("no-such-topic", 0): UNKNOWN_TOPIC}
    epoch = 7 if cv >= 6 else -1
    for fv in range(1, 10):
        err, got = fetch(w, fv, group, {"t": [0, 1, 2]})
        e = epoch if fv >= 5 else -1
        assert err == 0
        assert got == {("t", 0): (11, e, "m", 0), ("t", 1): (-1, -1, "", 0), ("t", 2): (22, e, "m", 0)}, fv
        if fv >= 2:  # topics=null: every committed partition
            assert fetch(w, fv, group, None) == (0, {("t", 0): (11, e, "m", 0), ("t", 2): (22, e, "m", 0)})
    # an unknown group has no offsets (no error)
    assert fetch(w, 8, f"nobody-{cv}", {"t": [0]}) == (0, {("t", 0): (-1, -1, "", 0)})


def test_offset_commit_and_fetch_v10_name_topics_by_id(bs, wire):
    # Kafka 4.2 (KIP-848): v10 of both carries topic ids instead of names; an unknown id is UNKNOWN_TOPIC_ID (100)
    w = wire("by-id")
    topic_id = w.call(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    ids = {t.name: t.topic_id for t in topic_id.topics}
    tid, ghost = ids["t"], uuid.uuid4()
    C, F = REQUEST_CLASSES[COMMIT], REQUEST_CLASSES[FETCH]
    CT = C.OffsetCommitRequestTopic
    r = w.call(
        COMMIT,
        10,
        group_id="by-id",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            CT(
                topic_id=tid,
                partitions=[
                    CT.OffsetCommitRequestPartition(
                        partition_index=1, committed_offset=33, committed_leader_epoch=2, committed_metadata="v10"
                    )
                ],
            ),
            CT(
                topic_id=ghost,
                partitions=[
                    CT.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
                    )
                ],
            ),
        ],
    )
    assert {(t.topic_id, p.partition_index): p.error_code for t in r.topics for p in t.partitions} == {
        (tid, 1): 0,
        (ghost, 0): 100,
    }
    assert fetch(w, 9, "by-id", {"t": [1]}) == (0, {("t", 1): (33, 2, "v10", 0)})  # the same offsets by name
    G = F.OffsetFetchRequestGroup
    for topics in (
        [
            G.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=[0, 1]),
            G.OffsetFetchRequestTopics(topic_id=ghost, partition_indexes=[0]),
        ],
        None,
    ):
        g = w.call(
            FETCH,
            10,
            groups=[G(group_id="by-id", topics=topics, member_id=None, member_epoch=-1)],
            require_stable=False,
        ).groups[0]
        got = {
            (t.topic_id, p.partition_index): (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions
        }
        want = {(tid, 1): (33, 0)} if topics is None else {(tid, 0): (-1, 0), (tid, 1): (33, 0), (ghost, 0): (-1, 100)}
        assert (g.error_code, got) == (0, want)


def test_offset_fetch_multi_group_and_member_commits(bs, wire):
    w = wire("mg")
    commit(w, 9, "mg-1", {("t", 0): 5})
    commit(w, 9, "mg-2", {("t", 1): 6})
    G = REQUEST_CLASSES[FETCH].OffsetFetchRequestGroup
    r = w.call(
        FETCH,
        8,
        groups=[G(group_id="mg-1", topics=None), G(group_id="mg-2", topics=None), G(group_id="", topics=None)],
        require_stable=False,
    )
    got = {
        g.group_id: (
            g.error_code,
            [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions],
        )
        for g in r.groups
    }
    assert got == {"mg-1": (0, [("t", 0, 5)]), "mg-2": (0, [("t", 1, 6)]), "": (24, [])}  # 24 INVALID_GROUP_ID
    # a member commits with its generation; a stale generation or a stranger is refused
    j = join(w, 9, "mg-3")
    w.call(SYNC, 5, **sync_fields(5, "mg-3", 1, j.member_id, [(j.member_id, b"")]))
    assert commit(w, 9, "mg-3", {("t", 0): 1}, gen=1, member=j.member_id) == {("t", 0): 0}
    assert commit(w, 9, "mg-3", {("t", 0): 1}, gen=0, member=j.member_id) == {("t", 0): ILLEGAL_GEN}
    assert commit(w, 9, "mg-3", {("t", 0): 1}, gen=1, member="who") == {("t", 0): UNKNOWN_MEMBER}
    assert commit(w, 9, "mg-3", {("t", 0): 1}) == {("t", 0): UNKNOWN_MEMBER}  # admin commit, group active
    assert commit(w, 8, "never-joined", {("t", 0): 1}, gen=3, member="x") == {("t", 0): ILLEGAL_GEN}
    assert commit(w, 9, "never-joined", {("t", 0): 1}, gen=3, member="x") == {("t", 0): GROUP_NOT_FOUND}
    assert commit(w, 9, "mg-big", {("t", 0): 1}, metadata="x" * 5000) == {("t", 0): 12}  # METADATA_TOO_LARGE


# -- ListGroups / DescribeGroups / DeleteGroups / OffsetDelete ---------------------------------------------------------
def test_list_groups_every_version_and_filters(bs, wire):
    w = wire("lister")
    commit(w, 9, "list-simple", {("t", 0): 1})
    j = join(w, 9, "list-stable")
    w.call(SYNC, 5, **sync_fields(5, "list-stable", 1, j.member_id, [(j.member_id, b"")]))
    for v in range(6):
        f: dict[str, Any] = {}
        if v >= 4:
            f["states_filter"] = []
        if v >= 5:
            f["types_filter"] = []
        r = w.call(LIST, v, **f)
        groups = {g.group_id: g for g in r.groups}
        assert r.error_code == 0 and {"list-simple", "list-stable"} <= set(groups)
        assert (groups["list-stable"].protocol_type, groups["list-simple"].protocol_type) == ("consumer", "")
        if v >= 4:
            assert (groups["list-stable"].group_state, groups["list-simple"].group_state) == ("Stable", "Empty")
        if v >= 5:
            assert groups["list-stable"].group_type == "classic"
    stable = {g.group_id for g in w.call(LIST, 4, states_filter=["stable"]).groups}
    assert "list-stable" in stable and "list-simple" not in stable
    assert w.call(LIST, 5, states_filter=[], types_filter=["consumer"]).groups == []
    assert "list-simple" in {g.group_id for g in w.call(LIST, 5, states_filter=[], types_filter=["classic"]).groups}


@pytest.mark.parametrize("v", range(7))
def test_describe_groups_every_version(bs, wire, v):
    w = wire("describer")
    group = f"desc-{v}"
    j = join(w, min(v + 3, 9), group)
    w.call(SYNC, 3, **sync_fields(3, group, 1, j.member_id, [(j.member_id, b"a")]))
    f: dict[str, Any] = {"groups": [group, f"missing-{v}"]}
    if v >= 3:
        f["include_authorized_operations"] = False
    r = w.call(DESCRIBE, v, **f)
    g, missing = r.groups
    assert (g.error_code, g.group_state, g.protocol_data, len(g.members)) == (0, "Stable", "range", 1)
    m = g.members[0]
    assert (m.member_id, m.client_id, bytes(m.member_metadata), bytes(m.member_assignment)) == (
        j.member_id,
        "describer",
        SUB,
        b"a",
    )
    if v >= 6:
        assert (missing.error_code, missing.group_state) == (GROUP_NOT_FOUND, "Dead") and missing.error_message
    else:
        assert (missing.error_code, missing.group_state, missing.members) == (0, "Dead", [])
    if v >= 3:
        assert g.authorized_operations is None  # not requested: INT32_MIN on the wire
        r = w.call(DESCRIBE, v, groups=[group], include_authorized_operations=True)
        # READ, DELETE, DESCRIBE and (Kafka 4.x group configs) DESCRIBE_CONFIGS, ALTER_CONFIGS
        assert set(r.groups[0].authorized_operations) == {3, 6, 8, 10, 11}


@pytest.mark.parametrize("v", range(3))
def test_delete_groups_every_version(bs, wire, v):
    w = wire()
    commit(w, 9, f"del-{v}", {("t", 0): 3})
    j = join(w, 9, f"busy-{v}")
    r = w.call(DELETE, v, groups_names=[f"del-{v}", f"busy-{v}", f"ghost-{v}"])
    assert {x.group_id: x.error_code for x in r.results} == {
        f"del-{v}": 0,
        f"busy-{v}": NON_EMPTY,
        f"ghost-{v}": GROUP_NOT_FOUND,
    }
    assert fetch(w, 8, f"del-{v}", None) == (0, {})
    assert f"del-{v}" not in {g.group_id for g in w.call(LIST, 0).groups}
    assert j.error_code == 0


def test_offset_delete(bs, wire):
    w = wire()
    commit(w, 9, "od", {("t", 0): 1, ("t", 1): 2})
    T = REQUEST_CLASSES[OFFSET_DELETE].OffsetDeleteRequestTopic
    P = T.OffsetDeleteRequestPartition
    r = w.call(
        OFFSET_DELETE,
        0,
        group_id="od",
        topics=[T(name="t", partitions=[P(partition_index=0)]), T(name="nope", partitions=[P(partition_index=0)])],
    )
    assert r.error_code == 0
    assert {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions} == {
        ("t", 0): 0,
        ("nope", 0): UNKNOWN_TOPIC,
    }
    assert fetch(w, 8, "od", None)[1] == {("t", 1): (2, 7, "m", 0)}
    assert w.call(OFFSET_DELETE, 0, group_id="od-ghost", topics=[]).error_code == GROUP_NOT_FOUND
    # a consumer group with members protects the topics it subscribes to
    j = join(w, 9, "od-live")
    w.call(SYNC, 5, **sync_fields(5, "od-live", 1, j.member_id, [(j.member_id, b"")]))
    commit(w, 9, "od-live", {("t", 0): 1}, gen=1, member=j.member_id)
    r = w.call(OFFSET_DELETE, 0, group_id="od-live", topics=[T(name="t", partitions=[P(partition_index=0)])])
    assert r.topics[0].partitions[0].error_code == SUBSCRIBED


# -- persistence across kill -9 ----------------------------------------------------------------------------------------
def test_group_and_offsets_survive_kill9(broker_factory):
    b = broker_factory(**{"offsets.topic.num.partitions": 5})
    ck.create_topic(b.bootstrap, "t", 3)
    w = Wire(b.bootstrap, "k9")
    assert w.call(JOIN, 9, **join_fields(9, "k9", "")).error_code in (COORD_NA, 16)  # no offsets topic yet
    find_coordinator(b.bootstrap)
    j = join(w, 9, "k9")
    w.call(SYNC, 5, **sync_fields(5, "k9", 1, j.member_id, [(j.member_id, b"asg")]))
    assert commit(w, 9, "k9", {("t", 0): 40, ("t", 1): 41}, gen=1, member=j.member_id) == {("t", 0): 0, ("t", 1): 0}
    assert commit(w, 9, "k9", {("t", 0): 42}, gen=1, member=j.member_id) == {("t", 0): 0}  # latest wins
    w.close()
    b.restart(kill=True)
    w = Wire(b.bootstrap, "k9")
    _, got = wait_until(lambda: next((r for r in [fetch(w, 9, "k9", None)] if r[0] == 0), None), timeout=10)
    assert got == {("t", 0): (42, 7, "m", 0), ("t", 1): (41, 7, "m", 0)}
    # the member is still in generation 1 after the restart: its heartbeat is accepted and its assignment kept
    assert w.call(HEARTBEAT, 4, **hb_fields(4, "k9", 1, j.member_id)).error_code == 0
    d = w.call(DESCRIBE, 5, groups=["k9"], include_authorized_operations=False).groups[0]
    assert (d.group_state, [bytes(m.member_assignment) for m in d.members]) == ("Stable", [b"asg"])
    # the next rebalance continues the generation sequence
    j2 = w.call(JOIN, 9, **join_fields(9, "k9", j.member_id))
    assert (j2.error_code, j2.generation_id) == (0, 2)
    w.close()


def test_advertised_group_versions(bs, wire):
    r = wire().call(18, 3, client_software_name="t", client_software_version="1")
    adv = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    for key in (COMMIT, FETCH, FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, DELETE, OFFSET_DELETE):
        assert adv[key] == SUPPORTED_VERSIONS[key]
