"""The CLI's admin client sends a controller-bound request again while the answer is NOT_CONTROLLER (an election
under way), as Kafka's admin client does, and gives up at its timeout; other errors are not retried. The broker
side here is a scripted one on a real socket: a real cluster answers NOT_CONTROLLER only in a window too short to
hit on purpose (forwarded requests wait for a new controller to take office)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from strata.cli.admin_client import AdminClient, AdminError
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import RESPONSE_CLASSES, SUPPORTED_VERSIONS, ApiKey, encode_response


class ScriptedBroker:
    """Answers ApiVersions with Strata's table and each CreateTopics with the next error code of `script`."""

    def __init__(self, script: list[int]) -> None:
        self.script = list(script)
        self.create_requests = 0
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _recv(self, conn: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def _serve(self) -> None:
        conn, _ = self._srv.accept()
        with conn:
            try:
                while True:
                    (size,) = struct.unpack(">i", self._recv(conn, 4))
                    payload = self._recv(conn, size)
                    api_key, version, corr = struct.unpack_from(">hhi", payload)
                    conn.sendall(self._answer(api_key, version, corr))
            except (ConnectionError, OSError):
                return

    def _answer(self, api_key: int, version: int, corr: int) -> bytes:
        cls = RESPONSE_CLASSES[api_key]
        if api_key == ApiKey.API_VERSIONS:
            keys = [
                cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()
            ]
            return encode_response(cls(version=version, error_code=0, api_keys=keys, throttle_time_ms=0), corr)
        assert api_key == ApiKey.CREATE_TOPICS
        self.create_requests += 1
        code = self.script.pop(0) if self.script else 0
        res = cls.CreatableTopicResult(
            name="t",
            topic_id=None,
            error_code=code,
            error_message=None,
            topic_config_error_code=0,
            num_partitions=1,
            replication_factor=1,
            configs=[],
        )
        return encode_response(cls(version=version, throttle_time_ms=0, topics=[res]), corr)

    def close(self) -> None:
        self._srv.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[list[int]], ScriptedBroker]]:
    made: list[ScriptedBroker] = []

    def make(script: list[int]) -> ScriptedBroker:
        b = ScriptedBroker(script)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def test_not_controller_is_retried_until_a_controller_answers(scripted):
    b = scripted([ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_CONTROLLER])
    with AdminClient(f"127.0.0.1:{b.port}", timeout=10) as a:
        a.create_topic("t", 1, 1)
    assert b.create_requests == 3


def test_not_controller_gives_up_at_the_timeout_with_the_error(scripted):
    b = scripted([ErrorCode.NOT_CONTROLLER] * 100)
    t0 = time.monotonic()
    with AdminClient(f"127.0.0.1:{b.port}", timeout=1.0) as a, pytest.raises(AdminError) as ei:
        a.create_topic("t", 1, 1)
    assert ei.value.code == ErrorCode.NOT_CONTROLLER and "NOT_CONTROLLER" in str(ei.value)
    assert time.monotonic() - t0 < 5.0 and 2 <= b.create_requests < 100


def test_other_errors_are_not_retried(scripted):
    b = scripted([ErrorCode.TOPIC_ALREADY_EXISTS])
    with AdminClient(f"127.0.0.1:{b.port}", timeout=10) as a, pytest.raises(AdminError) as ei:
        a.create_topic("t", 1, 1)
    assert ei.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and b.create_requests == 1
