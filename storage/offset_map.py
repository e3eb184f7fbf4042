"""The log cleaner's bounded key -> offset map (Kafka's SkimpyOffsetMap), built over a log's dirty range."""

from __future__ import annotations

import hashlib
from array import array

_md5 = hashlib.md5


class OffsetMap:
    """Key -> offset map in flat buffers (Kafka's SkimpyOffsetMap): each slot is the key's 16-byte MD5 (one
    bytearray) and its offset + 1 (an int64 array; 0 marks an empty slot), open addressing with linear probing.
    Memory is `slots * 24` bytes, never more than the configured dedupe buffer; the map is "full" at `load_factor`
    of its slots."""

    BYTES_PER_ENTRY = 24

    def __init__(self, memory: int, load_factor: float = 0.9, expected_entries: int | None = None) -> None:
        capacity = max(1, memory // self.BYTES_PER_ENTRY)
        slots = capacity
        if expected_entries is not None:  # no need to touch more memory than the job needs
            slots = min(capacity, max(16, int(expected_entries / load_factor) + 1))
        self.slots = slots
        self.max_entries = max(1, min(int(slots * load_factor), slots - 1))  # always an empty slot: probes end
        self._digests = bytearray(slots * 16)
        self._offsets = array("q", bytes(slots * 8))  # offset + 1; 0 = empty slot
        self.size = 0
        self.latest_offset = -1

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    def put(self, key: bytes, offset: int) -> None:
        digest = _md5(key).digest()
        slots, digests, offsets = self.slots, self._digests, self._offsets
        i = int.from_bytes(digest[:8], "big") % slots
        while offsets[i]:  # linear probing (the hot loop: kept inline)
            if digests[i * 16 : i * 16 + 16] == digest:
                break
            i += 1
            if i == slots:
                i = 0
        else:
            digests[i * 16 : i * 16 + 16] = digest
            self.size += 1
        offsets[i] = offset + 1
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset recorded for `key`, or -1."""
        digest = _md5(key).digest()
        slots, digests, offsets = self.slots, self._digests, self._offsets
        i = int.from_bytes(digest[:8], "big") % slots
        while True:
            o = offsets[i]
            if not o or digests[i * 16 : i * 16 + 16] == digest:
                return o - 1
            i += 1
            if i == slots:
                i = 0

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset


__all__ = ["OffsetMap"]
