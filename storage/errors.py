"""Storage exceptions, each carrying the Kafka error code the broker puts in its response."""

from __future__ import annotations

from strata.protocol.errors import ErrorCode
from strata.protocol.records import RecordBatchError


class StorageError(Exception):
    """Base of storage failures; `error_code` is the Kafka protocol error code."""

    error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StorageError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptRecordError(StorageError):
    error_code = ErrorCode.CORRUPT_MESSAGE


class RecordTooLargeError(StorageError):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(StorageError):
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidTimestampError(StorageError):
    error_code = ErrorCode.INVALID_TIMESTAMP


class KafkaStorageError(StorageError):
    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class InvalidRecordError(StorageError):
    error_code = ErrorCode.INVALID_RECORD


def from_batch_error(e: RecordBatchError) -> StorageError:
    """Translate strata.protocol.records' validation error (which cannot import storage) to the storage exception."""
    cls = CorruptRecordError if e.error_code == CorruptRecordError.error_code else InvalidRecordError
    return cls(str(e))


__all__ = [
    "StorageError",
    "OffsetOutOfRangeError",
    "CorruptRecordError",
    "RecordTooLargeError",
    "RecordBatchTooLargeError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "InvalidRecordError",
    "from_batch_error",
]
