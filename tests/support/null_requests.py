"""Requests with a null where Kafka's schema forbids one, for every advertised API and version.

Built with kafka-python's codec (its encoder writes a null for None whatever the schema says), from the table
strata.protocol.request_nulls_table: every field that is not nullable at a version, reached through one element of
each enclosing array.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from scripts.gen_request_nulls import attribute
from strata.protocol.registry import REQUEST_CLASSES, SUPPORTED_VERSIONS
from strata.protocol.request_nulls_table import REQUEST_FIELDS


@dataclass(frozen=True)
class NullCase:
    api_key: int
    version: int
    path: tuple[str, ...]  # attribute names from the request down to the field
    element: bool  # the null is an element of the (string) array at `path`, not the field itself

    @property
    def field(self) -> str:
        """The path as the broker names it: `topics[0].name`, `groups[0]`."""
        return (
            ".".join(f"{p}[0]" for p in self.path[:-1])
            + ("." if len(self.path) > 1 else "")
            + self.path[-1]
            + ("[0]" if self.element else "")
        )


def _cases(api_key: int, version: int, fields: tuple[Any, ...], prefix: tuple[str, ...]) -> Iterator[NullCase]:
    for name, kind, (lo, hi), (nlo, nhi), children in fields:
        if not lo <= version <= hi:
            continue
        path = (*prefix, name)
        if not nlo <= version <= nhi:
            yield NullCase(api_key, version, path, False)
        if kind == "p":
            yield NullCase(api_key, version, path, True)
        if children:
            yield from _cases(api_key, version, children, path)


def null_cases() -> list[NullCase]:
    return [
        case
        for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        for v in range(lo, hi + 1)
        for case in _cases(key, v, REQUEST_FIELDS[key], ())
    ]


def _nested(cls: Any, fields: list[dict[str, Any]], attr: str) -> tuple[str, bool, list[dict[str, Any]]]:
    """The type name of the struct (array) field `attr` of `cls`, whether it is an array, its JSON fields."""
    common = {c["name"]: c["fields"] for c in cls._json.get("commonStructs", [])}
    for f in fields:
        if attribute(f["name"]) == attr:
            type_name = f["type"].removeprefix("[]")
            return type_name, f["type"].startswith("[]"), f.get("fields") or common[type_name]
    raise KeyError(attr)


def null_request(case: NullCase, correlation_id: int = 1, client_id: str = "strata-it-null") -> bytes:
    """The framed request of `case`."""
    cls = REQUEST_CLASSES[case.api_key]
    if case.api_key == 3 and case.version == 0 and case.path == ("topics",):
        # kafka-python writes an empty array for a v0 Metadata without topics: the null by hand
        cid = client_id.encode()
        payload = struct.pack(">hhih", 3, 0, correlation_id, len(cid)) + cid + struct.pack(">i", -1)
        return struct.pack(">i", len(payload)) + payload
    top = cls[case.version]()
    obj, obj_cls, fields = top, cls, cls._json["fields"]
    for attr in case.path[:-1]:
        type_name, is_array, fields = _nested(cls, fields, attr)
        child_cls = getattr(obj_cls, type_name)
        child = child_cls()
        setattr(obj, attr, [child] if is_array else child)
        obj, obj_cls = child, child_cls
    setattr(obj, case.path[-1], [None] if case.element else None)
    top.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(top.encode(header=True, framed=True))


__all__ = ["NullCase", "null_cases", "null_request"]
