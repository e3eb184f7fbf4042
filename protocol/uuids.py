"""Kafka's Uuid text form: URL-safe base64 of the 16 bytes, without padding (22 characters)."""

from __future__ import annotations

import base64
import uuid


def kafka_uuid_str(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def parse_kafka_uuid(s: str) -> uuid.UUID:
    s = s.strip()
    if len(s) == 36:  # also accept the canonical hex form
        return uuid.UUID(s)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
