"""Byte-level mutations of an encoded request body, and object-level ones (nulls, huge arrays, extreme ints).

Byte mutations know nothing of the schema: flips, inserted and deleted spans, truncation, and "lies": an int16,
int32 or unsigned varint written over whatever was there, with the values that mean null, empty, negative or
huge in Kafka's encodings (so string and array lengths, counts and sizes lie).
"""

from __future__ import annotations

import random
import struct
from typing import Any

from .values import INT_EXTREMES

LIES_16 = (-1, -2, 0, 1, 0x7FFF, -0x8000)
LIES_32 = (-1, -2, 0, 1, 0x7FFFFFFF, -0x80000000, 1 << 20, 1 << 28, 100_000)
LIES_VARINT = (0, 1, 2, 0x7F, 0x80, 1 << 20, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 35)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def mutate_bytes(rnd: random.Random, body: bytes) -> tuple[str, bytes]:
    """One to three byte mutations of ``body``; returns their names and the result."""
    buf = bytearray(body)
    names = []
    for _ in range(rnd.choice((1, 1, 1, 2, 3))):
        op = rnd.choice(("flip", "flip", "set", "insert", "delete", "truncate", "lie16", "lie32", "lievar", "dup"))
        names.append(op)
        pos = rnd.randrange(len(buf) + 1)
        if op == "flip" and buf:
            for _ in range(rnd.randrange(1, 5)):
                i = rnd.randrange(len(buf))
                buf[i] ^= 1 << rnd.randrange(8)
        elif op == "set" and buf:
            for _ in range(rnd.randrange(1, 5)):
                buf[rnd.randrange(len(buf))] = rnd.choice((0, 0xFF, 0x7F, 0x80, rnd.randrange(256)))
        elif op == "insert":
            buf[pos:pos] = rnd.randbytes(rnd.randrange(1, 17))
        elif op == "delete":
            del buf[pos : pos + rnd.randrange(1, 17)]
        elif op == "truncate":
            del buf[pos:]
        elif op == "lie16":
            buf[pos : pos + 2] = struct.pack(">h", rnd.choice(LIES_16))
        elif op == "lie32":
            buf[pos : pos + 4] = struct.pack(">i", rnd.choice(LIES_32))
        elif op == "lievar":
            v = uvarint(rnd.choice(LIES_VARINT))
            buf[pos : pos + len(v)] = v
        elif op == "dup" and buf:
            n = rnd.randrange(1, min(64, len(buf)) + 1)
            start = rnd.randrange(len(buf) - n + 1)
            buf[pos:pos] = buf[start : start + n] * rnd.choice((1, 2, 10))
    return "+".join(names), bytes(buf)


# -- object level ------------------------------------------------------------------------------------------------
def _slots(obj: Any, version: int, path: str = "") -> list[tuple[Any, Any, str]]:
    """Every (container, field, path) of a request object, depth first."""
    out: list[tuple[Any, Any, str]] = []
    for f in obj._struct._fields if hasattr(obj._struct, "_fields") else ():
        if not f.for_version_q(version):
            continue
        p = f"{path}.{f.name}" if path else f.name
        out.append((obj, f, p))
        val = getattr(obj, f.name, None)
        if f.is_struct_array() and val:
            for i, item in enumerate(val):
                out.extend(_slots(item, version, f"{p}[{i}]"))
        elif f.is_struct() and val is not None:
            out.extend(_slots(val, version, p))
    return out


def set_null(rnd: random.Random, req: Any, version: int) -> str | None:
    """A null where the schema may or may not allow one (a string, bytes, array or struct field)."""
    cands = [
        (o, f, p)
        for o, f, p in _slots(req, version)
        if f.is_array() or f.is_struct() or getattr(f, "type_str", "") in ("string", "bytes", "records")
    ]
    if not cands:
        return None
    o, f, p = rnd.choice(cands)
    setattr(o, f.name, None)
    return f"null {p}" + ("" if f.nullable_for_version_q(version) else " (non-nullable)")


def extreme_int(rnd: random.Random, req: Any, version: int) -> str | None:
    cands = [(o, f, p) for o, f, p in _slots(req, version) if getattr(f, "type_str", "") in INT_EXTREMES]
    if not cands:
        return None
    o, f, p = rnd.choice(cands)
    v = rnd.choice(INT_EXTREMES[f.type_str])
    setattr(o, f.name, v)
    return f"{p}={v}"


def huge_array(rnd: random.Random, req: Any, version: int, max_items: int) -> str | None:
    """An array field repeated to up to ``max_items`` entries (the same entry over and over)."""
    cands = [(o, f, p) for o, f, p in _slots(req, version) if f.is_array() and getattr(o, f.name, None)]
    if not cands:
        return None
    o, f, p = rnd.choice(cands)
    items = getattr(o, f.name)
    n = rnd.choice((1000, 10_000, max_items))
    setattr(o, f.name, (items * (n // len(items) + 1))[:n])
    return f"{p} x{n}"
