"""Wire-level constants shared by the broker, its storage and its clients (admin CLI, Spark source), defined
once.

Names follow Kafka's (ListOffsetsRequest, FetchRequest); modules that used shorter local names import these
under those names (rlmm_types as Kafka's REMOTE_LOG_METADATA_TOPIC_NAME).
"""

from __future__ import annotations

__all__ = [
    "CONSUMER_REPLICA_ID",
    "DEBUG_REPLICA_ID",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_PENDING_UPLOAD_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LIST_OFFSETS_SENTINEL_MIN_VERSION",
    "MAX_TIMESTAMP",
    "REMOTE_LOG_METADATA_TOPIC",
]

# ListOffsets timestamp sentinels (ListOffsetsRequest.*_TIMESTAMP)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # v7+
EARLIEST_LOCAL_TIMESTAMP = -4  # v8+, KIP-405
LATEST_TIERED_TIMESTAMP = -5  # v9+, KIP-1005
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # v11+, KIP-1023

# The first ListOffsets version that may ask each sentinel; below it the partition gets UNSUPPORTED_VERSION.
LIST_OFFSETS_SENTINEL_MIN_VERSION = {
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}

# replica_id of ListOffsets/Fetch requests that do not come from a follower (FetchRequest.CONSUMER_REPLICA_ID)
CONSUMER_REPLICA_ID = -1
DEBUG_REPLICA_ID = -2

# KIP-405's internal topic of remote log segment metadata
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
