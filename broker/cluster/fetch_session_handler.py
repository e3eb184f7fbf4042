"""The fetcher's side of KIP-227 incremental fetch sessions (Kafka's FetchSessionHandler), used by a follower's
ReplicaFetcher for its leader.

The first fetch is full (session epoch 0) and the leader may answer it with a session id. Later fetches send only the
partitions whose request fields changed since the last one (added or altered) and forget those no longer fetched;
the leader answers only partitions with something new. A session error (the leader restarted, or an epoch got out of
step) or a failed request starts over with a full fetch, closing the old session.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from strata.protocol.errors import ErrorCode

from ..fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

Key = tuple[uuid.UUID, int]  # (topic id, partition)
# what a partition's fetch asks: fetch offset, log start offset, max bytes, current leader epoch, last fetched epoch
PartitionData = tuple[int, int, int, int, int]

SESSION_ERRORS = frozenset(
    (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    )
)


@dataclass(slots=True)
class FetchRequestData:
    session_id: int
    epoch: int
    to_send: dict[Key, PartitionData]
    to_forget: list[Key]


@dataclass(slots=True)
class FetchSessionHandler:
    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH
    partitions: dict[Key, PartitionData] = field(default_factory=dict)  # as the leader's session holds them

    def build(self, wanted: dict[Key, PartitionData]) -> FetchRequestData:
        """The next request for `wanted`: everything (full) or what changed (incremental)."""
        previous, self.partitions = self.partitions, dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return FetchRequestData(self.session_id, self.epoch, dict(wanted), [])
        to_send = {k: d for k, d in wanted.items() if previous.get(k) != d}
        to_forget = [k for k in previous if k not in wanted]
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(self, error: int, session_id: int) -> None:
        if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif error:
            self.epoch = INITIAL_EPOCH  # a full fetch that closes the session and asks for a new one
        elif session_id == INVALID_SESSION_ID:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH  # no session (any more)
        elif self.epoch == INITIAL_EPOCH:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)

    def handle_error(self) -> None:
        """The request failed (no answer): the leader may have moved the epoch on; start over in full."""
        self.epoch = INITIAL_EPOCH


__all__ = ["SESSION_ERRORS", "FetchRequestData", "FetchSessionHandler", "PartitionData"]
