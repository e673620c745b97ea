"""Which of the store's Parquet files can be read: the one place that decides it.

A file of the store can be damaged outside mai's control (a disk error, a copy cut short, a file overwritten by
hand). Such a file costs its rows, never the store: every listing of a table's files (`storage/partitions.py`
`table_files` and `Partition.files`, so the catalog's views, the generation store's lookups, statistics and
compaction) leaves it out, so commands keep working over the rest, and a reader that is given one by path
(`parquet.reading`) stops with one line that names the file and says what to run. `mai store verify` lists them and
`--repair` moves them into the store's quarantine folder (storage/verify.py).

The check on a listing is cheap and reads no footer: a Parquet file starts with `PAR1`, ends with a 4-byte footer
length and `PAR1`, and its footer fits in it (two small reads per file: docs/benchmarks.md). It finds a truncated
file, a file overwritten with anything else and an empty one; a file whose footer is damaged inside is found by
`mai store verify`, which parses every footer, and by the readers, which name the file when pyarrow cannot read it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mai.errors import ConfigError

MAGIC = b"PAR1"
REPAIR_HINT = "run `mai store verify --repair` (it moves the file into the store's quarantine folder)"


@dataclass(frozen=True)
class Unreadable:
    """A file of the store that cannot be read as Parquet, and why."""

    path: Path
    reason: str
    hint: str = REPAIR_HINT

    def line(self) -> str:
        """One line for a user: the file, what is wrong with it, what to run."""
        state = self.reason if self.reason.startswith("missing") else f"unreadable ({self.reason})"
        return f"{self.path} is {state}: {self.hint}"


class DamagedFileError(ConfigError):
    """A file a command needs is missing or unreadable: one line naming it and what to run."""

    def __init__(self, damage: Unreadable) -> None:
        super().__init__(damage.line())
        self.damage = damage


def parquet_damage(path: Path) -> str | None:
    """Why `path` is not a whole Parquet file (None: it looks whole). Two reads of a few bytes (module docstring)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return error.strerror or str(error)
    try:
        size = os.fstat(descriptor).st_size
        if size < 12:
            return f"{size} bytes: too short for a Parquet file"
        head, tail = os.pread(descriptor, 4, 0), os.pread(descriptor, 8, size - 8)
    except OSError as error:
        return error.strerror or str(error)
    finally:
        os.close(descriptor)
    if head != MAGIC or tail[4:] != MAGIC:
        return "not a Parquet file: truncated, or overwritten"
    return "its footer is longer than the file: truncated" if int.from_bytes(tail[:4], "little") + 12 > size else None


def split_readable(files: Iterable[Path]) -> tuple[list[Path], list[Unreadable]]:
    """`files` that look whole, in order, and the others with their reasons."""
    readable: list[Path] = []
    damaged: list[Unreadable] = []
    for path in files:
        reason = parquet_damage(path)
        if reason is None:
            readable.append(path)
        else:
            damaged.append(Unreadable(path, reason))
    return readable, damaged
