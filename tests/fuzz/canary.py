"""The canary: a data set written with confluent-kafka before fuzzing, read back byte for byte after each batch.

Three topics the fuzzer never names: a plain one (3 partitions, gzip), a compacted one (unique keys, lz4) and a
zstd one; every record keyed, with headers and a fixed timestamp. ``verify`` reads every partition from offset 0
with one librdkafka consumer and compares key, value, headers, timestamp and offset, and checks that the log end
offset did not move (nothing was appended to a canary partition) and the log start offset is still 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from tests.support import ck
from tests.support.records import Rec, assert_partition_matches, by_partition, gen_records, past_ts_base

KEEP = {"retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True)
class CanaryTopic:
    name: str
    partitions: int
    codec: str
    config: tuple[tuple[str, str], ...] = ()


TOPICS = (
    CanaryTopic("canary-plain", 3, "gzip"),
    CanaryTopic("canary-compact", 2, "lz4", (("cleanup.policy", "compact"),)),
    CanaryTopic("canary-zstd", 1, "zstd"),
)
NAMES = frozenset(t.name for t in TOPICS)


class Canary:
    def __init__(self, seed: int, per_topic: int = 120):
        self.expected: dict[str, list[Rec]] = {}
        for i, t in enumerate(TOPICS):
            n = per_topic
            self.expected[t.name] = gen_records(
                n, t.partitions, seed + i, ts_base=past_ts_base(n), tag=f"{t.name}-", headers=True
            )

    def write(self, bootstrap: str) -> None:
        for t in TOPICS:
            ck.create_topic(bootstrap, t.name, t.partitions, config={**KEEP, **dict(t.config)})
            ck.produce_all(
                bootstrap, t.name, self.expected[t.name], compression=t.codec, **{"enable.idempotence": True}
            )

    def verify(self, bootstrap: str, timeout: float = 60.0) -> None:
        """AssertionError (with the first difference) unless every canary record reads back as written."""
        c = ck.consumer(bootstrap, **{"fetch.error.backoff.ms": 50})
        try:
            want: dict[tuple[str, int], list[Rec]] = {}
            for name, recs in self.expected.items():
                for p, prs in by_partition(recs).items():
                    want[(name, p)] = prs
            for (name, p), prs in want.items():
                lo, hi = c.get_watermark_offsets(TopicPartition(name, p), timeout=timeout)
                assert (lo, hi) == (0, len(prs)), f"canary {name}[{p}]: log start/end {lo}/{hi}, expected 0/{len(prs)}"
            c.assign([TopicPartition(name, p, 0) for name, p in want])
            got: dict[tuple[str, int], list[Rec]] = {k: [] for k in want}
            left = sum(len(v) for v in want.values())
            deadline = time.monotonic() + timeout
            while left > 0:
                assert time.monotonic() < deadline, f"canary: {left} records not read back within {timeout}s"
                for m in c.consume(num_messages=1000, timeout=0.5):
                    assert m.error() is None, f"canary: consumer error {m.error()}"
                    got[(m.topic() or "", m.partition() or 0)].append(ck.msg_to_rec(m))
                    left -= 1
            for (name, p), prs in want.items():
                try:
                    assert_partition_matches(prs, got[(name, p)], p)
                except AssertionError as e:
                    raise AssertionError(f"canary {name}: {e}") from None
        finally:
            c.close()
