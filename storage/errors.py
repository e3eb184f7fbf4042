"""Storage exceptions, each carrying the Kafka error code the broker puts in its response."""

from __future__ import annotations

from strata.protocol.errors import ErrorCode
from strata.protocol.records import RecordBatchError


class StorageError(Exception):
    """Base of storage failures; `error_code` is the Kafka protocol error code."""

    error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR
    record_errors: list[tuple[int, str]] | None = None  # per-record rejections (batch index, message)


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


class UnsupportedCompressionTypeError(StorageError):
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def record_validation_error(error_code: int, message: str, record_errors: list[tuple[int, str]]) -> StorageError:
    """Kafka's RecordValidationException: records of a batch failed the per-record checks (INVALID_TIMESTAMP or
    INVALID_RECORD); Produce v8+ lists them in `record_errors` as (batch index, message)."""
    e = (InvalidTimestampError if error_code == ErrorCode.INVALID_TIMESTAMP else InvalidRecordError)(message)
    e.record_errors = record_errors
    return e


_BY_CODE: dict[int, type[StorageError]] = {
    c.error_code: c
    for c in (CorruptRecordError, RecordTooLargeError, InvalidTimestampError, UnsupportedCompressionTypeError)
}


def from_batch_error(e: RecordBatchError) -> StorageError:
    """Translate strata.protocol.records' validation error (which cannot import storage) to the storage exception."""
    return _BY_CODE.get(e.error_code, InvalidRecordError)(str(e))


__all__ = [
    "StorageError",
    "OffsetOutOfRangeError",
    "CorruptRecordError",
    "RecordTooLargeError",
    "RecordBatchTooLargeError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "InvalidRecordError",
    "record_validation_error",
    "UnsupportedCompressionTypeError",
    "from_batch_error",
]
