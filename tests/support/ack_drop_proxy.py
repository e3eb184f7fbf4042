"""A TCP proxy in front of a broker that loses Produce acknowledgements on purpose.

Every client connection gets its own upstream connection; frames are forwarded unchanged in both directions. While
cuts remain, the proxy forwards a Produce request (acks != 0) whose batches carry a producer id, waits for the broker's
response to it -- so the broker has certainly written the batch -- then drops that response and closes both
connections: the client sees its connection die with the request in flight, exactly the "written but not
acknowledged" case an idempotent producer must retry without duplicating. A request made only of retries of cut
batches is let through, so each cut also loses new data.

Start the broker with ``advertised.listeners`` pointing at the proxy so clients reconnect through it. The proxy runs an
asyncio loop in a daemon thread; ``produce_batches`` records (producer id, epoch, base sequence) of every batch of
every Produce request it forwarded, and ``cut_batches`` those whose acknowledgement it dropped.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Any

from strata.protocol.records import iter_batches
from strata.protocol.registry import decode_request

PRODUCE = 0

BatchKey = tuple[str, int, int, int, int]  # topic, partition, producer id, epoch, base sequence


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def produce_batches(payload: bytes) -> tuple[int, list[BatchKey]]:
    """(acks, batch keys) of a Produce request frame payload (header + body)."""
    api_key, version = struct.unpack_from(">hh", payload, 0)
    assert api_key == PRODUCE
    req = decode_request(payload, api_key, version).body
    keys: list[BatchKey] = []
    for td in req.topic_data:
        for pd in td.partition_data:
            data = bytes(pd.records or b"")
            for _, h in iter_batches(data):
                keys.append((td.name, pd.index, h.producer_id, h.producer_epoch, h.base_sequence))
    return req.acks, keys


class AckDropProxy:
    def __init__(
        self,
        upstream_host: str = "127.0.0.1",
        upstream_port: int | None = None,
        *,
        cuts: int = 1,
        port: int | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = port or _free_port()
        self.cuts_left = cuts
        self.produce_batches: list[BatchKey] = []
        self.cut_batches: list[BatchKey] = []
        self.cut_requests = 0
        self._cut_set: set[BatchKey] = set()
        self.connections = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, upstream_port: int | None = None) -> AckDropProxy:
        if upstream_port is not None:
            self.upstream = (self.upstream[0], upstream_port)
        assert self.upstream[1], "upstream port unknown"
        self._thread = threading.Thread(target=self._run, name="ack-drop-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())
        self._loop.run_forever()
        self._loop.close()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self._ready.set()

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.close()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> AckDropProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- forwarding --------------------------------------------------------------------------------------------
    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self.connections += 1
        try:
            b_reader, b_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.close()
            return
        self._writers.update((c_writer, b_writer))
        # correlation ids of requests whose response must be dropped (with the batches they carried)
        doomed: dict[int, list[BatchKey]] = {}
        cut = asyncio.Event()

        async def client_to_broker() -> None:
            while not cut.is_set():
                try:
                    head = await c_reader.readexactly(4)
                    payload = await c_reader.readexactly(struct.unpack(">i", head)[0])
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                if len(payload) >= 8 and struct.unpack_from(">h", payload, 0)[0] == PRODUCE:
                    acks, keys = produce_batches(payload)
                    with self._lock:
                        self.produce_batches.extend(keys)
                        fresh = any(k not in self._cut_set for k in keys)  # not only retries of cut batches
                        if (
                            acks != 0
                            and self.cuts_left > 0
                            and keys
                            and fresh
                            and not cut.is_set()
                            and all(k[2] >= 0 for k in keys)
                        ):
                            self.cuts_left -= 1
                            self._cut_set.update(keys)
                            doomed[struct.unpack_from(">i", payload, 4)[0]] = keys
                b_writer.write(head + payload)
                await b_writer.drain()
            b_writer.close()

        async def broker_to_client() -> None:
            while True:
                try:
                    head = await b_reader.readexactly(4)
                    payload = await b_reader.readexactly(struct.unpack(">i", head)[0])
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                corr = struct.unpack_from(">i", payload, 0)[0]
                keys = doomed.pop(corr, None)
                if keys is not None:
                    # the broker answered, so the batch is in its log: lose the answer and the connection
                    with self._lock:
                        self.cut_batches.extend(keys)
                        self.cut_requests += 1
                    cut.set()
                    break
                c_writer.write(head + payload)
                try:
                    await c_writer.drain()
                except ConnectionError:
                    break
            for w in (c_writer, b_writer):
                try:
                    w.transport.abort()
                except Exception:  # noqa: BLE001, S110 - closing both ends whatever state either is in
                    pass

        try:
            await asyncio.gather(client_to_broker(), broker_to_client())
        finally:
            with self._lock:
                # requests marked for a cut whose response never came (the connection died first): not a cut
                self.cuts_left += len(doomed)
            self._writers.discard(c_writer)
            self._writers.discard(b_writer)
            for w in (c_writer, b_writer):
                w.close()

    # -- observations ------------------------------------------------------------------------------------------
    def retried(self) -> list[BatchKey]:
        """Cut batches the client sent again afterwards (same producer id, epoch and sequence)."""
        with self._lock:
            seen: dict[BatchKey, int] = {}
            for k in self.produce_batches:
                seen[k] = seen.get(k, 0) + 1
            return [k for k in self.cut_batches if seen.get(k, 0) >= 2]


__all__ = ["AckDropProxy", "produce_batches"]
