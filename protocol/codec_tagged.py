"""A non-copying tagged-field reader for kafka-python's generated decoders.

kafka-python 3.0.12 decodes the tagged fields of a struct, when there are any, from `BytesIO(bytes(data[pos:]))`:
a copy of the rest of the frame for every such struct, so a request made of n structs that carry a tag costs
O(n * size). A Fetch v17 with 20,000 topics each carrying a tag took 5 s to decode and one with 100,000 (12 MB, far
below socket.request.max.bytes) held the event loop for over six minutes (the fuzzer's finding N6). The generated
code only reads the stream with `read(n)` and asks `tell()` how far it went, so a reader over the caller's buffer
at `pos` serves it with no copy. `install()` swaps the emitter before any decoder is compiled (they are compiled
lazily and cached); it is idempotent and checks the library still has the shape it patches.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.schemas.fields import struct as _struct

_Buffer = bytes | bytearray | memoryview


class TaggedFieldsReader:
    """`read`/`tell` over `data[start:]` without copying it (what io.BytesIO offers the generated code)."""

    __slots__ = ("_data", "_pos", "_start")

    def __init__(self, data: _Buffer, start: int) -> None:
        self._data = data if isinstance(data, memoryview) else memoryview(data)
        self._start = self._pos = start

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else min(self._pos + n, len(self._data))
        out = bytes(self._data[self._pos : end])
        self._pos = end
        return out

    def tell(self) -> int:
        return self._pos - self._start


def _emit_tagged_decode(self: Any, ctx: Any, var_name: str, indent: int, version: int) -> None:
    """kafka-python's emitter, with `TaggedFieldsReader(data, pos)` where it had `_BytesIO(bytes(data[pos:]))`."""
    tf_var = ctx.next_var("tf")
    ctx.globs[tf_var] = self.tagged_fields(version)
    ctx.globs["_TaggedFieldsReader"] = TaggedFieldsReader
    bio_var = ctx.next_var("bio")
    ctx.emit(indent, f"{bio_var} = _TaggedFieldsReader(data, pos)")
    ctx.emit(indent, f"_tfd = {tf_var}.decode({bio_var}, version={version})")
    ctx.emit(indent, f"pos += {bio_var}.tell()")
    ctx.emit(indent, "if _tfd:")
    ctx.emit(indent, "    for _tk, _tv in _tfd.items():")
    ctx.emit(indent, '        if _tk.startswith("_"):')
    ctx.emit(indent, f"            if {var_name}.unknown_tags is None: {var_name}.unknown_tags = {{}}")
    ctx.emit(indent, f"            {var_name}.unknown_tags[_tk] = _tv")
    ctx.emit(indent, "        else:")
    ctx.emit(indent, f"            if {var_name}.tags is None: {var_name}.tags = set()")
    ctx.emit(indent, f"            {var_name}.tags.add(_tk)")
    ctx.emit(indent, f"            setattr({var_name}, _tk, _tv)")


def install() -> None:
    """Replace the library's emitter (a third-party patch, pinned to kafka-python 3.0.12's codegen)."""
    emitter = getattr(_struct.StructField, "_emit_tagged_decode", None)
    if emitter is None:
        raise RuntimeError("kafka-python's struct codegen changed: no StructField._emit_tagged_decode to replace")
    if emitter is not _emit_tagged_decode:
        setattr(_struct.StructField, "_emit_tagged_decode", _emit_tagged_decode)  # noqa: B010 - a library patch


__all__ = ["TaggedFieldsReader", "install"]
