"""S3RemoteStorageManager's configuration: the `rsm.config.*` keys (prefix removed) as a typed, validated dataclass."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from strata.config import parse_bool

MIB = 1 << 20
S3_MIN_PART_SIZE = 5 * MIB


def _bool(v: Any) -> bool:
    return parse_bool(v, empty=False)


@dataclass
class S3Config:
    bucket: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    path_style: bool = False
    key_prefix: str = ""
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    chunk_size: int = 4 * MIB
    compression: bool = False
    compression_level: int = 3
    compression_heuristic: bool = False
    part_size: int = 16 * MIB
    upload_concurrency: int = 4
    api_call_timeout_s: float = 120.0
    attempt_timeout_s: float = 30.0
    max_attempts: int = 5
    backoff_s: float = 0.1
    backoff_max_s: float = 10.0
    max_connections: int = 32
    cache_memory_bytes: int = 64 * MIB
    cache_disk_path: Path | None = None
    cache_disk_bytes: int = 1 << 30
    prefetch_bytes: int = 8 * MIB
    manifest_cache_entries: int = 1000
    custom_metadata_fields: tuple[str, ...] = ()
    checksum: bool = True

    _KEYS: ClassVar[dict[str, tuple[str, Callable[[Any], Any]]]] = {
        "s3.bucket.name": ("bucket", str),
        "s3.region": ("region", str),
        "s3.endpoint.url": ("endpoint_url", str),
        "s3.path.style.access.enabled": ("path_style", _bool),
        "key.prefix": ("key_prefix", str),
        "aws.access.key.id": ("access_key_id", str),
        "aws.secret.access.key": ("secret_access_key", str),
        "aws.session.token": ("session_token", str),
        "chunk.size": ("chunk_size", int),
        "compression.enabled": ("compression", _bool),
        "compression.zstd.level": ("compression_level", int),
        "compression.heuristic.enabled": ("compression_heuristic", _bool),
        "s3.multipart.upload.part.size": ("part_size", int),
        "s3.multipart.upload.concurrency": ("upload_concurrency", int),
        "s3.api.call.timeout.ms": ("api_call_timeout_s", lambda v: int(v) / 1000),
        "s3.api.call.attempt.timeout.ms": ("attempt_timeout_s", lambda v: int(v) / 1000),
        "s3.retry.max.attempts": ("max_attempts", int),
        "s3.retry.backoff.ms": ("backoff_s", lambda v: int(v) / 1000),
        "s3.retry.backoff.max.ms": ("backoff_max_s", lambda v: int(v) / 1000),
        "s3.max.connections": ("max_connections", int),
        "fetch.chunk.cache.size": ("cache_memory_bytes", int),
        "fetch.chunk.cache.path": ("cache_disk_path", Path),
        "fetch.chunk.cache.disk.size": ("cache_disk_bytes", int),
        "fetch.chunk.cache.prefetch.max.size": ("prefetch_bytes", int),
        "fetch.manifest.cache.size": ("manifest_cache_entries", int),
        "s3.checksum.check.enabled": ("checksum", _bool),
        "custom.metadata.fields.include": (
            "custom_metadata_fields",
            lambda v: tuple(x.strip().upper() for x in str(v).split(",") if x.strip()),
        ),
    }

    @classmethod
    def from_mapping(cls, configs: Mapping[str, Any]) -> S3Config:
        kwargs: dict[str, Any] = {}
        for key, raw in configs.items():
            spec = cls._KEYS.get(key)
            if spec is None or raw is None or (isinstance(raw, str) and raw == "" and key != "key.prefix"):
                continue
            name, conv = spec
            try:
                kwargs[name] = conv(raw)
            except (ValueError, TypeError) as e:
                raise ValueError(f"invalid value {raw!r} for rsm.config.{key}: {e}") from None
        if not kwargs.get("bucket"):
            raise ValueError("rsm.config.s3.bucket.name is required")
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both rsm.config.aws.access.key.id and aws.secret.access.key, or neither")
        if self.chunk_size <= 0:
            raise ValueError("rsm.config.chunk.size must be positive")
        if self.part_size < S3_MIN_PART_SIZE:
            raise ValueError(f"rsm.config.s3.multipart.upload.part.size must be at least {S3_MIN_PART_SIZE}")
        if self.attempt_timeout_s <= 0 or self.api_call_timeout_s <= 0:
            raise ValueError("S3 call timeouts must be positive")
        if self.max_attempts < 1 or self.upload_concurrency < 1 or self.max_connections < 1:
            raise ValueError("retry attempts, upload concurrency and connections must be at least 1")
        bad = set(self.custom_metadata_fields) - {"REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY"}
        if bad:
            raise ValueError(f"unknown custom metadata fields {sorted(bad)}")


__all__ = ["MIB", "S3_MIN_PART_SIZE", "S3Config"]
