"""Kafka's text checkpoint files, written atomically (tmp + fsync + rename + dir fsync) so a crash leaves either
the old or the new file, never a torn one.

OffsetCheckpointFile holds `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
`replication-offset-checkpoint` in each log dir: "0\\n<count>\\n<topic> <partition> <offset>\\n...".
"""

from __future__ import annotations

import os
from pathlib import Path

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CHECKPOINT_VERSION = 0


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (which makes the creations, renames and deletions of its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, sync: bool = True) -> None:
    """Replace `path`: write `<path>.tmp` and rename it over `path`, so a crash leaves the old file or the new one,
    never a torn one. `sync`: durably (fsync the file before the rename, the directory after it)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_path(path.parent)


class CheckpointFormatError(ValueError):
    pass


def read_small_file(path: Path | str) -> bytes | None:
    """A small file's bytes, None when absent: plain `os` calls (thousands of partitions' metadata and epoch files
    are read at startup; `Path.read_text`'s buffered text stream costs several times more)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_checkpoint_lines(path: Path | str) -> list[str] | None:
    """Entry lines of a "version\\ncount\\nentries" file; None when absent; CheckpointFormatError when malformed."""
    data = read_small_file(path)
    if data is None:
        return None
    return parse_checkpoint_lines(data.decode(), str(path))


def parse_checkpoint_lines(text: str, source: str) -> list[str]:
    """Entry lines of checkpoint text (a file's, or one shipped with a remote segment); `source` names it in
    errors."""
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointFormatError(f"{source}: unsupported or missing version line")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointFormatError(f"{source}: bad entry count {lines[1]!r}") from None
    entries = [ln for ln in lines[2:] if ln.strip()]
    if len(entries) != count:
        raise CheckpointFormatError(f"{source}: expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint_lines(path: Path, entries: list[str], sync: bool = True) -> None:
    body = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(e + "\n" for e in entries)
    atomic_write(path, body.encode(), sync=sync)


class OffsetCheckpointFile:
    """(topic, partition) -> offset. Topic names cannot contain spaces, so lines split on whitespace."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        write_checkpoint_lines(self.path, [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())])

    def read(self) -> dict[tuple[str, int], int]:
        lines = read_checkpoint_lines(self.path)
        out: dict[tuple[str, int], int] = {}
        for ln in lines or []:
            parts = ln.split()
            if len(parts) != 3:
                raise CheckpointFormatError(f"{self.path}: malformed line {ln!r}")
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CheckpointFormatError(f"{self.path}: malformed line {ln!r}") from None
        return out


__all__ = [
    "OffsetCheckpointFile",
    "atomic_write",
    "fsync_path",
    "parse_checkpoint_lines",
    "read_checkpoint_lines",
    "read_small_file",
    "write_checkpoint_lines",
    "CheckpointFormatError",
    "RECOVERY_POINT_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
]
