"""Atomic file writes: a file is written whole under a temp name in its own directory, then renamed over its real
name (`os.replace`), so a reader, or a process killed mid-write, sees the old file or the new one, never part
of one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path, fsync: bool = False) -> Iterator[Path]:
    """A temp path beside `path` for the block to write (a file, or a symbolic link); when the block ends it
    replaces `path`, fsync'ed first when `fsync`. The temp name starts with `.tmp-` (the store's clean-up removes
    one that a killed writer left) and ends in `.partial` (no glob for `path`'s suffix matches it, so no reader
    picks up a partial file); it is removed when the block fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}.partial")
    try:
        yield temp
        if fsync:
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_atomically(path: Path, data: bytes | str) -> Path:
    """`data` as the whole content of `path` (text as UTF-8), written through `atomic_path`."""
    with atomic_path(path) as temp:
        temp.write_bytes(data.encode() if isinstance(data, str) else data)
    return path
