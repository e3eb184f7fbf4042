"""A small synchronous Kafka admin client for the ``strata`` CLI: one TCP socket, kafka-python's codec.

It talks plain Kafka wire protocol (negotiated with ApiVersions), so it works against any Kafka-compatible broker and
needs none of the broker's runtime. Errors surface as :class:`AdminError` with the Kafka error name and message.
"""

from __future__ import annotations

import functools
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Self, TypeVar

from strata.protocol.constants import EARLIEST_LOCAL_TIMESTAMP as EARLIEST_LOCAL
from strata.protocol.constants import EARLIEST_TIMESTAMP as EARLIEST
from strata.protocol.constants import LATEST_TIERED_TIMESTAMP as LATEST_TIERED
from strata.protocol.constants import LATEST_TIMESTAMP as LATEST
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey
from strata.protocol.scram import ScramMechanism, salted_password
from strata.protocol.uuids import kafka_uuid_str

from .command_config import ClientSecurity, CommandConfigError, SaslAuthenticationFailed, process_security

CLIENT_ID = "strata-cli"
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


P = ParamSpec("P")
T = TypeVar("T")


class AdminError(Exception):
    """A readable failure: connection problems, or a Kafka error code (`code`) with its message."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def error_text(code: int, message: str | None = None) -> str:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return f"{name}: {message}" if message else name


def check_error(code: int, message: str | None = None, what: str = "") -> None:
    """Raise AdminError for a non-zero Kafka error code, its text prefixed with `what` (the request and subject)."""
    if code:
        raise AdminError(f"{what}{error_text(code, message)}", code)


def _at_controller(request: Callable[P, T]) -> Callable[P, T]:
    """For requests the controller answers: sent again while it answers NOT_CONTROLLER (an election under way, or
    a controller that just lost the role), with backoff, until the client's timeout, as Kafka's admin client does.
    Nothing was applied when that error comes back, so sending again is safe."""

    @functools.wraps(request)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        deadline = time.monotonic() + args[0].timeout  # type: ignore[attr-defined]
        backoff = 0.1
        while True:
            try:
                return request(*args, **kwargs)
            except AdminError as e:
                if e.code != ErrorCode.NOT_CONTROLLER or time.monotonic() + backoff > deadline:
                    raise
            time.sleep(backoff)  # retry backoff, not synchronisation
            backoff = min(backoff * 2, 1.0)

    return run


at_controller = _at_controller  # for the requests subcommand modules send themselves (ElectLeaders, ...)


@dataclass
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    log_start_offset: int = -1
    end_offset: int = -1
    error: str | None = None
    local_log_start_offset: int | None = None  # ListOffsets -4 (v8+); None when the broker cannot answer it
    latest_tiered_offset: int | None = None  # ListOffsets -5 (v9+): highest offset in remote storage, -1: none
    local_size: int | None = None  # DescribeLogDirs on the leader: bytes of its local segments


@dataclass
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:  # as Kafka's Node.toString, which its tools print
        return f"{self.host}:{self.port} (id: {self.node_id} rack: {self.rack if self.rack is not None else 'null'})"


@dataclass
class TopicDescription:
    name: str
    topic_id: str | None
    internal: bool
    partitions: list[PartitionDescription] = field(default_factory=list)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass
class DescribedConfig:
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    synonyms: list[tuple[str, str | None, int]]
    config_type: int = 0
    doc: str | None = None


@dataclass
class UserScramCredentials:
    """One user's answer to DescribeUserScramCredentials: (mechanism, iterations) pairs, or a Kafka error."""

    user: str
    credentials: list[tuple[ScramMechanism, int]]
    error_code: int = 0
    error_message: str | None = None


@dataclass
class ScramUpsertion:
    """A credential to store, computed here from the password as Kafka's admin client does: the broker receives
    the salt and SaltedPassword, never the password."""

    user: str
    mechanism: ScramMechanism
    iterations: int
    salt: bytes
    salted_password: bytes

    @classmethod
    def from_password(cls, user: str, mechanism: ScramMechanism, password: str, iterations: int) -> ScramUpsertion:
        salt = secrets.token_bytes(32)
        return cls(user, mechanism, iterations, salt, salted_password(mechanism, password, salt, iterations))


def parse_bootstrap(spec: str) -> list[tuple[str, int]]:
    """Every host:port of a comma-separated list (brackets allowed around IPv6 hosts)."""
    out = []
    for entry in spec.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host:
            raise AdminError(f"bootstrap server {entry.strip()!r} is not of the form host:port")
        try:
            out.append((host.strip("[]"), int(port)))
        except ValueError:
            raise AdminError(f"bootstrap server {entry.strip()!r} has a non-numeric port") from None
    return out


def _connect(host: str, port: int, timeout: float, tls: ssl.SSLContext | None = None) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise AdminError(f"connection refused by {host}:{port}: is a broker running there?") from None
    except TimeoutError:
        raise AdminError(f"timed out connecting to {host}:{port}") from None
    except OSError as e:
        raise AdminError(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        sock.close()
        raise AdminError(
            f"TLS handshake with {host}:{port} failed: certificate verify failed: {e.verify_message or e.reason}"
        ) from None
    except (ssl.SSLError, OSError) as e:
        sock.close()
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or "the connection was closed"
        raise AdminError(f"TLS handshake with {host}:{port} failed: {why} (is it a TLS listener?)") from None


class AdminClient:
    """One connection to one broker. Use as a context manager or call close(). `security` (TLS, SASL): by default
    the command's --command-config (strata.cli.command_config.use_for_this_process), else PLAINTEXT."""

    def __init__(
        self, bootstrap: str = "127.0.0.1:9092", timeout: float = 30.0, security: ClientSecurity | None = None
    ) -> None:
        self.timeout = timeout
        self.security = security if security is not None else process_security()  # --command-config
        self._corr = 0
        self._reauth_at: float | None = None  # KIP-368: when to authenticate again (monotonic), None: never
        try:
            tls = self.security.ssl_context()
        except CommandConfigError as e:
            raise AdminError(str(e)) from None
        # like Kafka's clients: the first bootstrap server that answers (a broker of the list may be down)
        errors: list[str] = []
        for self.host, self.port in parse_bootstrap(bootstrap):
            try:
                self._sock = _connect(self.host, self.port, timeout, tls)
                break
            except AdminError as e:
                errors.append(str(e))
        else:
            raise AdminError("; ".join(errors))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.versions: dict[int, tuple[int, int]] = {}
        self._peers: dict[tuple[str, int], AdminClient] = {}  # partition leaders' connections (ListOffsets...)
        self._negotiate()
        if self.security.sasl:
            self._authenticate()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()
        self._sock.close()

    # -- transport -----------------------------------------------------------------------------------------------
    # request / api_version / call are public so that a subcommand module can speak the APIs it needs (groups,
    # Fetch, ...) in a subclass or a helper of its own, without this class knowing every API.
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self._sock.recv(n - len(buf))
            except TimeoutError:
                raise AdminError(f"timed out waiting for {self.host}:{self.port}") from None
            except OSError as e:
                raise AdminError(f"connection to {self.host}:{self.port} failed: {e.strerror or e}") from None
            if not chunk:
                raise AdminError(f"{self.host}:{self.port} closed the connection (request not supported?)")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Send one request at exactly `version` and return the decoded response (kafka-python's object)."""
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._authenticate()  # before the broker's session ends (KIP-368), as Kafka's clients do
        return self._send(api_key, version, **fields)

    def _send(self, api_key: int, version: int, **fields: Any) -> Any:
        self._corr += 1
        req = REQUEST_CLASSES[api_key](version=version, **fields)
        req.with_header(correlation_id=self._corr, client_id=CLIENT_ID)
        try:
            self._sock.sendall(bytes(req.encode(header=True, framed=True)))
        except OSError as e:
            raise AdminError(f"connection to {self.host}:{self.port} failed: {e.strerror or e}") from None
        (size,) = struct.unpack(">i", self._recv_exact(4))
        payload = self._recv_exact(size)
        (corr,) = struct.unpack_from(">i", payload, 0)
        if corr != self._corr:
            raise AdminError(f"response correlation id {corr} does not match request {self._corr}")
        return RESPONSE_CLASSES[api_key].decode(payload, version=version, header=True)

    def _authenticate(self) -> None:
        """SaslHandshake v1 then SaslAuthenticate until the mechanism is done; AdminError with the broker's
        message when it refuses (the broker then closes the connection)."""
        sec = self.security
        self._reauth_at = None
        hs = self._send(ApiKey.SASL_HANDSHAKE, 1, mechanism=sec.mechanism)
        if hs.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise AdminError(
                f"{self.host}:{self.port} does not enable SASL mechanism {sec.mechanism} "
                f"(it enables: {', '.join(hs.mechanisms) or 'none'})",
                hs.error_code,
            )
        check_error(hs.error_code, what="SaslHandshake: ")
        version = min(self.versions.get(ApiKey.SASL_AUTHENTICATE, (0, 1))[1], 2)
        started = time.monotonic()
        client = sec.sasl_client()
        token: bytes | None = client.first()
        lifetime_ms = 0
        while token is not None:
            resp = self._send(ApiKey.SASL_AUTHENTICATE, version, auth_bytes=token)
            if resp.error_code:
                raise AdminError(
                    f"authentication with {sec.mechanism} as {sec.username or 'the token principal'} failed: "
                    f"{error_text(resp.error_code, resp.error_message)}",
                    resp.error_code,
                )
            lifetime_ms = getattr(resp, "session_lifetime_ms", 0)
            try:
                token = client.respond(bytes(resp.auth_bytes))
            except SaslAuthenticationFailed as e:
                raise AdminError(f"authentication with {sec.mechanism} failed: {e}") from None
        if lifetime_ms > 0:  # re-authenticate at 85 % of the session, as Kafka's clients (KIP-368)
            self._reauth_at = started + lifetime_ms / 1000 * 0.85

    def _negotiate(self) -> None:
        resp = self._send(ApiKey.API_VERSIONS, 3, client_software_name="strata-cli", client_software_version="0.1.0")
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self._send(ApiKey.API_VERSIONS, 0)
        check_error(resp.error_code, what="ApiVersions: ")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def api_version(self, api_key: int, ours_max: int | None = None) -> int:
        """Highest version both sides speak: the broker's range and kafka-python's schema."""
        cls = REQUEST_CLASSES[api_key]
        if api_key not in self.versions:
            raise AdminError(f"the broker does not support {cls.__name__.removesuffix('Request')}")
        lo, hi = self.versions[api_key]
        v = min(hi, cls.max_version, ours_max if ours_max is not None else hi)
        if v < max(lo, cls.min_version):
            raise AdminError(
                f"no common version of {cls.__name__.removesuffix('Request')} "
                f"(broker {lo}-{hi}, client up to {cls.max_version})"
            )
        return v

    def call(self, api_key: int, ours_max: int | None = None, **fields: Any) -> tuple[int, Any]:
        """(version used, response) of one request at the highest common version (at most `ours_max`)."""
        v = self.api_version(api_key, ours_max)
        return v, self.request(api_key, v, **fields)

    # -- topics --------------------------------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None) -> Any:
        """The Metadata response (v12 at most) for these topics, or for all topics (None)."""
        cls = REQUEST_CLASSES[ApiKey.METADATA]
        _, resp = self.call(
            ApiKey.METADATA,
            12,
            allow_auto_topic_creation=False,
            topics=None if topics is None else [cls.MetadataRequestTopic(name=t, topic_id=None) for t in topics],
        )
        return resp

    def list_topics(self, include_internal: bool = True) -> list[str]:
        resp = self.metadata(None)
        return sorted(t.name for t in resp.topics if include_internal or not t.is_internal)

    def all_partitions(self, include_internal: bool = True) -> dict[str, list[int]]:
        """Every topic's partition ids (one Metadata request)."""
        resp = self.metadata(None)
        return {
            t.name: sorted(p.partition_index for p in t.partitions)
            for t in resp.topics
            if not t.error_code and (include_internal or not t.is_internal)
        }

    def brokers(self) -> list[BrokerNode]:
        """The cluster's live brokers, by id (Metadata)."""
        resp = self.metadata([])
        return sorted(
            (BrokerNode(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in resp.brokers),
            key=lambda b: b.node_id,
        )

    def peer(self, host: str, port: int) -> AdminClient:
        """A connection to another broker of the cluster (this one for its own address), kept until close()."""
        if (host, port) == (self.host, self.port):
            return self
        key = (host, port)
        if key not in self._peers:
            self._peers[key] = AdminClient(f"{host}:{port}", self.timeout, self.security)
        return self._peers[key]

    def topic_partitions(self, topic: str) -> list[int]:
        """The partition ids of one topic (AdminError when it does not exist)."""
        resp = self.metadata([topic])
        t = resp.topics[0]
        check_error(t.error_code, None, f"topic {topic!r}: ")
        return sorted(p.partition_index for p in t.partitions)

    @_at_controller
    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        validate_only: bool = False,
    ) -> Any:
        cls = REQUEST_CLASSES[ApiKey.CREATE_TOPICS]
        topic = cls.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=[],
            configs=[cls.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
        )
        _, resp = self.call(
            ApiKey.CREATE_TOPICS, topics=[topic], timeout_ms=int(self.timeout * 1000), validate_only=validate_only
        )
        res = resp.topics[0]
        check_error(res.error_code, res.error_message, f"cannot create topic {name!r}: ")
        return res

    @_at_controller
    def delete_topic(self, name: str) -> None:
        cls = REQUEST_CLASSES[ApiKey.DELETE_TOPICS]
        v = self.api_version(ApiKey.DELETE_TOPICS)
        fields: dict[str, Any] = {"timeout_ms": int(self.timeout * 1000)}
        if v >= 6:
            fields["topics"] = [cls.DeleteTopicState(name=name, topic_id=None)]
        else:
            fields["topic_names"] = [name]
        resp = self.request(ApiKey.DELETE_TOPICS, v, **fields)
        res = resp.responses[0]
        check_error(res.error_code, getattr(res, "error_message", None), f"cannot delete topic {name!r}: ")

    @_at_controller
    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        cls = REQUEST_CLASSES[ApiKey.CREATE_PARTITIONS]
        _, resp = self.call(
            ApiKey.CREATE_PARTITIONS,
            topics=[cls.CreatePartitionsTopic(name=name, count=count, assignments=None)],
            timeout_ms=int(self.timeout * 1000),
            validate_only=validate_only,
        )
        res = resp.results[0]
        check_error(res.error_code, res.error_message, f"cannot add partitions to {name!r}: ")

    def by_leader(self, topic: str, partitions: Iterable[int]) -> list[tuple[AdminClient, list[int]]]:
        """Partitions grouped by the connection to their leader (ListOffsets and DeleteRecords are answered by the
        leader only); this connection for partitions without a known leader or led by its broker."""
        parts = list(partitions)
        resp = self.metadata([topic])
        endpoints = {b.node_id: (b.host, b.port) for b in resp.brokers}
        leaders = {p.partition_index: p.leader_id for t in resp.topics if t.name == topic for p in t.partitions}
        groups: dict[tuple[str, int], list[int]] = {}
        for p in parts:
            ep = endpoints.get(leaders.get(p, -1), (self.host, self.port))
            groups.setdefault(ep, []).append(p)
        out = []
        for ep, ps in groups.items():
            if ep == (self.host, self.port) or len(endpoints) <= 1:
                out.append((self, ps))
                continue
            peer = self._peers.get(ep)
            if peer is None:
                try:
                    peer = self._peers[ep] = AdminClient(f"{ep[0]}:{ep[1]}", self.timeout, self.security)
                except AdminError:
                    peer = self  # unreachable leader: ask here (the error names the problem)
            out.append((peer, ps))
        return out

    def list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int) -> dict[int, int]:
        """Offset per partition for a ListOffsets timestamp or sentinel (-2 earliest, -1 latest), from each
        partition's leader."""
        out: dict[int, int] = {}
        for conn, ps in self.by_leader(topic, partitions):
            out.update(conn._list_offsets(topic, ps, timestamp))
        return out

    def _list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int) -> dict[int, int]:
        cls = REQUEST_CLASSES[ApiKey.LIST_OFFSETS]
        T = cls.ListOffsetsTopic
        parts = [
            T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp) for p in partitions
        ]
        _, resp = self.call(
            ApiKey.LIST_OFFSETS,
            replica_id=-1,
            isolation_level=0,
            topics=[T(name=topic, partitions=parts)],
            timeout_ms=int(self.timeout * 1000),
        )
        out: dict[int, int] = {}
        for t in resp.topics:
            for p in t.partitions:
                check_error(p.error_code, None, f"ListOffsets {topic}-{p.partition_index}: ")
                out[p.partition_index] = p.offset
        return out

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        """Metadata (leader, replicas, ISR) plus log start and end offsets of every partition."""
        resp = self.metadata(names)
        out = []
        for t in sorted(resp.topics, key=lambda t: t.name or ""):
            check_error(t.error_code, None, f"topic {t.name!r}: ")
            desc = TopicDescription(t.name, _uuid_str(getattr(t, "topic_id", None)), bool(t.is_internal))
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                desc.partitions.append(
                    PartitionDescription(
                        p.partition_index,
                        p.leader_id,
                        getattr(p, "leader_epoch", -1),
                        list(p.replica_nodes),
                        list(p.isr_nodes),
                        error=error_text(p.error_code) if p.error_code else None,
                    )
                )
            ids = [p.partition for p in desc.partitions]
            if ids:
                starts = self.list_offsets(t.name, ids, EARLIEST)
                ends = self.list_offsets(t.name, ids, LATEST)
                for p in desc.partitions:
                    p.log_start_offset, p.end_offset = starts.get(p.partition, -1), ends.get(p.partition, -1)
                lo_max = self.versions.get(ApiKey.LIST_OFFSETS, (0, -1))[1]
                if lo_max >= 8:
                    local = self.list_offsets(t.name, ids, EARLIEST_LOCAL)
                    tiered = self.list_offsets(t.name, ids, LATEST_TIERED) if lo_max >= 9 else {}
                    for p in desc.partitions:
                        p.local_log_start_offset = local.get(p.partition)
                        p.latest_tiered_offset = tiered.get(p.partition)
                if self.versions.get(ApiKey.DESCRIBE_LOG_DIRS) is not None:
                    sizes = self.local_sizes(t.name, ids)
                    for p in desc.partitions:
                        p.local_size = sizes.get(p.partition)
            out.append(desc)
        return out

    def local_sizes(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Bytes of each partition's local log on its leader (DescribeLogDirs), summed over the leader's log dirs."""
        out: dict[int, int] = {}
        for p in self._log_dir_partitions(topic, partitions):
            out[p.partition_index] = out.get(p.partition_index, 0) + p.partition_size
        return out

    def offset_lags(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """DescribeLogDirs' OffsetLag of each partition's log on its leader (a read replica's: how far it trails the
        origin's newest manifest)."""
        return {p.partition_index: p.offset_lag for p in self._log_dir_partitions(topic, partitions)}

    def _log_dir_partitions(self, topic: str, partitions: Iterable[int]) -> list[Any]:
        out = []
        for conn, ps in self.by_leader(topic, partitions):
            T = REQUEST_CLASSES[ApiKey.DESCRIBE_LOG_DIRS].DescribableLogDirTopic
            _, resp = conn.call(ApiKey.DESCRIBE_LOG_DIRS, topics=[T(topic=topic, partitions=list(ps))])
            check_error(getattr(resp, "error_code", 0), None, "DescribeLogDirs: ")
            for d in resp.results:
                if d.error_code:
                    continue  # an offline log dir holds nothing readable
                out += [p for t in d.topics if t.name == topic for p in t.partitions]
        return out

    def delete_records(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """Move log start offsets (offset -1 = the high watermark) on each partition's leader; returns the new low
        watermarks."""
        out: dict[int, int] = {}
        for conn, ps in self.by_leader(topic, offsets):
            out.update(conn._delete_records(topic, {p: offsets[p] for p in ps}))
        return out

    def _delete_records(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        cls = REQUEST_CLASSES[ApiKey.DELETE_RECORDS]
        T = cls.DeleteRecordsTopic
        _, resp = self.call(
            ApiKey.DELETE_RECORDS,
            topics=[
                T(
                    name=topic,
                    partitions=[T.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()],
                )
            ],
            timeout_ms=int(self.timeout * 1000),
        )
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                check_error(p.error_code, None, f"DeleteRecords {topic}-{p.partition_index}: ")
                out[p.partition_index] = p.low_watermark
        return out

    # -- configs -------------------------------------------------------------------------------------------------
    def describe_configs(
        self,
        resource_type: int,
        name: str,
        keys: list[str] | None = None,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> list[DescribedConfig]:
        cls = REQUEST_CLASSES[ApiKey.DESCRIBE_CONFIGS]
        _, resp = self.call(
            ApiKey.DESCRIBE_CONFIGS,
            resources=[
                cls.DescribeConfigsResource(resource_type=resource_type, resource_name=name, configuration_keys=keys)
            ],
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )
        res = resp.results[0]
        check_error(res.error_code, res.error_message, f"cannot describe configs of {name!r}: ")
        return [
            DescribedConfig(
                c.name,
                c.value,
                c.config_source,
                c.read_only,
                c.is_sensitive,
                [(s.name, s.value, s.source) for s in (c.synonyms or [])],
                getattr(c, "config_type", 0),
                getattr(c, "documentation", None),
            )
            for c in res.configs
        ]

    @_at_controller
    def alter_configs(
        self,
        resource_type: int,
        name: str,
        set: dict[str, str] | None = None,
        delete: Iterable[str] = (),
        append: dict[str, str] | None = None,
        subtract: dict[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs: SET(0) / DELETE(1) / APPEND(2) / SUBTRACT(3) in one request."""
        cls = REQUEST_CLASSES[ApiKey.INCREMENTAL_ALTER_CONFIGS]
        R = cls.AlterConfigsResource
        ops = (
            [R.AlterableConfig(name=k, config_operation=0, value=v) for k, v in (set or {}).items()]
            + [R.AlterableConfig(name=k, config_operation=1, value=None) for k in delete]
            + [R.AlterableConfig(name=k, config_operation=2, value=v) for k, v in (append or {}).items()]
            + [R.AlterableConfig(name=k, config_operation=3, value=v) for k, v in (subtract or {}).items()]
        )
        _, resp = self.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            resources=[R(resource_type=resource_type, resource_name=name, configs=ops)],
            validate_only=validate_only,
        )
        res = resp.responses[0]
        check_error(res.error_code, res.error_message, f"cannot alter configs of {name!r}: ")

    # -- SCRAM users (KIP-554) -----------------------------------------------------------------------------------
    def describe_user_scram_credentials(self, users: list[str] | None = None) -> list[UserScramCredentials]:
        """Every user with a credential (None), or these users, each with its own error if it has none."""
        cls = REQUEST_CLASSES[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
        _, resp = self.call(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            users=None if users is None else [cls.UserName(name=u) for u in users],
        )
        check_error(resp.error_code, resp.error_message, "cannot describe SCRAM credentials: ")
        return [
            UserScramCredentials(
                r.user,
                [(ScramMechanism.from_type(c.mechanism), c.iterations) for c in r.credential_infos],
                r.error_code,
                r.error_message,
            )
            for r in resp.results
        ]

    @_at_controller
    def alter_user_scram_credentials(
        self, upsertions: Iterable[ScramUpsertion] = (), deletions: Iterable[tuple[str, ScramMechanism]] = ()
    ) -> None:
        """Store and delete credentials in one request; the first user's error is raised (Kafka applies the rest)."""
        cls = REQUEST_CLASSES[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
        _, resp = self.call(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            deletions=[cls.ScramCredentialDeletion(name=u, mechanism=int(m)) for u, m in deletions],
            upsertions=[
                cls.ScramCredentialUpsertion(
                    name=u.user,
                    mechanism=int(u.mechanism),
                    iterations=u.iterations,
                    salt=u.salt,
                    salted_password=u.salted_password,
                )
                for u in upsertions
            ],
        )
        for r in resp.results:
            check_error(r.error_code, r.error_message, f"cannot alter SCRAM credentials of {r.user!r}: ")


def _uuid_str(u: Any) -> str | None:
    return kafka_uuid_str(u) if u is not None else None
