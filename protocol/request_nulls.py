"""Nulls where Kafka's schema forbids them, found in a decoded request.

kafka-python's codec reads a null string, bytes, array or struct wherever the wire has one; Kafka's generated
parser throws for a null in a field whose `nullableVersions` do not cover the request's version, so the request
never reaches a handler. `first_null` applies the same rule from the table that scripts/gen_request_nulls.py
generates from Kafka's message JSON (request_nulls_table.py), and `has_top_level_error` says whether the
response can carry INVALID_REQUEST (a top-level ErrorCode at that version).
"""

from __future__ import annotations

from typing import Any

from .request_nulls_table import REQUEST_FIELDS, TOP_LEVEL_ERROR_CODE

__all__ = ["NullFieldError", "first_null", "has_top_level_error"]


class NullFieldError(ValueError):
    """A decoded request holds a null in a non-nullable field (Kafka: InvalidRequestException while parsing)."""

    def __init__(self, field: str, client_id: str | None) -> None:
        super().__init__(f"null in non-nullable field {field}")
        self.field = field
        self.client_id = client_id


def _walk(fields: tuple[Any, ...], version: int, obj: Any, prefix: str) -> str | None:
    for name, kind, (lo, hi), (nlo, nhi), children in fields:
        if not lo <= version <= hi:
            continue
        value = getattr(obj, name, None)
        if value is None:
            if not nlo <= version <= nhi:
                return prefix + name
            continue
        if kind == "s":
            found = _walk(children, version, value, f"{prefix}{name}.")
            if found:
                return found
        elif kind == "p" or (kind == "a" and children):
            for i, item in enumerate(value):
                if item is None:
                    return f"{prefix}{name}[{i}]"
                if children:
                    found = _walk(children, version, item, f"{prefix}{name}[{i}].")
                    if found:
                        return found
    return None


def first_null(api_key: int, version: int, body: Any) -> str | None:
    """The path (`topics[2].name`) of the first field of `body` that is null where Kafka forbids it, or None."""
    fields = REQUEST_FIELDS.get(api_key)
    return _walk(fields, version, body, "") if fields else None


API_VERSIONS = 18


def has_top_level_error(api_key: int, version: int) -> bool:
    """Whether this response version has a top-level ErrorCode that can say INVALID_REQUEST. Not ApiVersions: clients
    read its error bodies in the v0 layout (KIP-511), so a v1+ error body is misread; the connection is closed, as
    Kafka's parser does for a null it refuses."""
    if api_key == API_VERSIONS:
        return False
    rng = TOP_LEVEL_ERROR_CODE.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]
