"""Partitions of the content-addressed tables, and their compaction.

A partition is one directory of immutable Parquet files of one table: a (model, prompt kind) of `generations`,
a large model of `attention` and `selections`. Runs append one small file per batch; compaction merges small
files into large ones sorted by id (so a lookup by id reads only the row groups whose statistics admit it),
removing duplicate identities, so the file count stays bounded and views need no deduplication.

Why a hand-written compaction and not Delta Lake or Iceberg: a plain `duckdb` session must keep reading the
store, and DuckDB reads those formats only through its `delta`/`iceberg` extensions, which it downloads on
first use (`INSTALL delta` fails offline, as on the machines this runs on); plain Parquet globs need nothing.

How readers never fail and never see a row twice: the partition's path (e.g. `store/generations/<model>/R`) is a
symlink to a version directory (`store/versions/generations/<model>/R/v000003`). Readers resolve the symlink
first and list that version (`Partition.files`; the catalog's views name the versions' directories), so a
reader reads one version whole, by paths that stay valid. Compaction builds the next version beside it (the merged file, plus hard links of the files it
keeps), then, under the partition's write lock (which every writer holds, shared, while it writes a file),
hard-links the files written meanwhile and swaps the symlink (an atomic rename). Old versions stay readable for
a grace period (queries that listed them still open their files), then are deleted. A compaction killed at any
point leaves the published version untouched; its unpublished version is removed by the next one.
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
import stat
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mai.files import atomic_path
from mai.identity import canonical_hash
from mai.storage.damage import DamagedFileError, Unreadable, split_readable
from mai.storage.paths import Home
from mai.storage.tables import Table, TableName

# pyarrow (and with it numpy, about 0.12 s of CPU) is imported where a file is written or compacted, not here: the
# catalog lists partitions' files through this module, and `mai sql` needs nothing more (docs/benchmarks.md)
if TYPE_CHECKING:
    import pyarrow as pa

TARGET_ROWS = 250_000        # files with fewer rows are merged again; a file at or over it is left as it is
AUTO_MIN_SMALL_FILES = 64    # the end of a run compacts a partition once it has this many batch files
ROW_GROUP_ROWS = 16_384      # row groups of a compacted file: the unit that id statistics prune
TIER_FANOUT = 4              # end-of-run compaction merges a size tier once it holds this many files
GRACE_S = 3600.0             # retired versions stay readable this long (a query, a catalog that listed them)
COMPACTED_PREFIX = "compacted-"
# what a folder of the store that something else took the place of costs, and what brings its rows back
FOLDER_HINT = ("run `mai store verify --repair` (it moves it into the store's quarantine folder; the next run computes "
               "its rows again)")


# what identifies a row: its `Table.key` values (ids are strings, an attention row's layer an int)
RowKey = tuple[str | int, ...]


@contextmanager
def _flock(path: Path, exclusive: bool, blocking: bool = True) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(handle.fileno(), mode)
        except BlockingIOError:
            yield False
            return
        yield True


class Partition:
    def __init__(self, home: Home, path: Path) -> None:
        self.home, self.path = home, path
        relative = path.relative_to(home.store)
        self.versions = home.store / "versions" / relative
        key = canonical_hash(relative.as_posix())[:24]
        self.write_lock = home.locks / f"partition-{key}.lock"
        self.compact_lock = home.locks / f"compact-{key}.lock"

    def current(self) -> Path | None:
        if self.path.is_symlink():
            return self.path.resolve()
        return self.path if self.path.is_dir() else None

    def files(self) -> list[Path]:
        """The readable files of the published version, by their version paths: a compaction that publishes the
        next version meanwhile leaves these in place (for GRACE_S), so a reader that listed them can read them. A
        damaged file is left out (storage/damage.py): it costs its rows, which a run then computes again."""
        return split_readable(self.listed())[0]

    def listed(self) -> list[Path]:
        """Every file of the published version, damaged ones included (for verification and compaction)."""
        current = self.current()
        return sorted(current.glob("*.parquet")) if current else []

    def ensure(self) -> None:
        """A new partition is published as version 0; a directory of an older store stays as it is until its
        first compaction turns it into versions. A file in the place of its folder (or of a folder above it) stops
        the writer with one line naming it (`DamagedFileError`): nothing can be written there."""
        check_folder(self.path, self.home.store)
        if self.path.exists():
            return
        with _flock(self.write_lock, exclusive=True):
            if not self.path.exists():
                first = self.versions / "v000000"
                first.mkdir(parents=True, exist_ok=True)
                self._publish(first)

    def _publish(self, version: Path) -> None:
        with atomic_path(self.path) as link:
            os.symlink(os.path.relpath(version, self.path.parent), link)


def not_a_folder(path: Path) -> str | None:
    """Why `path`, where the store keeps a folder, is not one (None: it is a folder, or nothing is there): a file
    in its place, or a link to a folder that is gone."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return "a link to a folder that is gone" if path.is_symlink() else None
    except NotADirectoryError:
        return None  # a file above it: named as itself
    return None if stat.S_ISDIR(status.st_mode) else "not a folder: a file is in its place"


def check_folder(path: Path, top: Path) -> None:
    """Raises `DamagedFileError` naming the first of `path`'s folders below `top` (the store) that is not one."""
    for folder in [*reversed(path.relative_to(top).parents[:-1]), path.relative_to(top)]:
        reason = not_a_folder(top / folder)
        if reason is not None:
            raise DamagedFileError(Unreadable(top / folder, reason, FOLDER_HINT))


def write_part(home: Home, directory: Path, rows: Sequence[Mapping[str, object]], table: TableName) -> Path:
    """Appends one batch file to the partition at `directory` (atomic, see parquet.write_rows); compaction
    waits for it to be in place before it swaps versions."""
    from mai.storage.parquet import write_rows

    partition = Partition(home, directory)
    partition.ensure()
    with _flock(partition.write_lock, exclusive=False):
        return write_rows(directory / f"part-{uuid.uuid4().hex}.parquet", rows, table)


def table_files(home: Home, table: Table) -> list[Path]:
    """Every readable published file of a table (a damaged one is left out: storage/damage.py)."""
    return split_readable(listed_files(home, table))[0]


def listed_files(home: Home, table: Table) -> list[Path]:
    """Every published file of a table, damaged ones included: a content-addressed one's through its partitions'
    current versions."""
    if table.content_addressed:
        return [f for p in partitions(home, table) for f in p.listed()]
    return sorted(home.table_dir(table.name).glob(table.files))


def partitions(home: Home, table: Table) -> list[Partition]:
    """The partitions of a content-addressed table (a plain table has none)."""
    if not table.content_addressed:
        return []
    pattern = "/".join(["*"] * table.depth)
    return [Partition(home, path) for path in sorted(home.table_dir(table.name).glob(pattern))
            if not path.name.startswith(".") and path.is_dir()]


@dataclass
class Compaction:
    partition: str
    files_before: int = 0
    files_after: int = 0
    rows_merged: int = 0
    duplicates_removed: int = 0
    skipped: str = ""
    seconds: float = 0.0
    removed_versions: list[str] = field(default_factory=list)


def compact(partition: Partition, table: Table, min_small_files: int = 2, grace_s: float = GRACE_S,
            tiered: bool = False) -> Compaction:
    """Merges the partition's files under TARGET_ROWS rows into one file sorted by id, without duplicates
    (`tiered`: only files of the lowest size tiers, see `_tiered_choice`). Skips (saying why) when another
    compaction of the partition runs or fewer than `min_small_files` files would be merged."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    report = Compaction(partition.path.relative_to(partition.home.root).as_posix())
    with _flock(partition.compact_lock, exclusive=True, blocking=False) as mine:
        if not mine:
            report.skipped = "another compaction of this partition is running"
            return report
        _adopt_legacy_directory(partition)
        report.removed_versions = _remove_old_versions(partition, grace_s)
        files, damaged = split_readable(partition.listed())
        if damaged:  # a new version would drop the file: it is quarantined first, never lost
            report.skipped = damaged[0].line()
            return report
        rows = {f: pq.ParquetFile(f).metadata.num_rows for f in files}
        small = [f for f in files if rows[f] < TARGET_ROWS]
        small = _tiered_choice(small, rows) if tiered else small
        report.files_before = report.files_after = len(files)
        if len(small) < max(2, min_small_files):
            report.skipped = f"{len(small)} small files (compacts from {max(2, min_small_files)})"
            return report
        kept = [f for f in files if f not in small]
        merged = _merge(small, set(row_keys(kept, table)), table)
        report.rows_merged, report.duplicates_removed = merged.num_rows, sum(rows[f] for f in small) - merged.num_rows
        report.files_after = _publish_next(partition, files, kept, merged)
        report.removed_versions += _remove_old_versions(partition, grace_s)
    report.seconds = time.perf_counter() - started
    return report


def _tiered_choice(files: list[Path], rows: dict[Path, int]) -> list[Path]:
    """Size tiers of base TIER_FANOUT: merge every tier up to the lowest one that holds TIER_FANOUT files, counting
    the file being merged where it will land, and cascade upwards the same way. A merged file lands at least
    one tier higher, so a row is rewritten about once per tier (log4 of the partition's rows), not at every
    compaction, and a partition holds fewer than TIER_FANOUT files per tier."""
    def tier(count: int) -> int:
        return int(math.log(max(count, 1), TIER_FANOUT))

    chosen: list[Path] = []
    remaining, merged = list(files), 0
    while True:
        counts = Counter(tier(rows[file]) for file in remaining)
        if merged:
            counts[tier(merged)] += 1
        full = [t for t, n in counts.items() if n >= TIER_FANOUT]
        if not full:
            return chosen
        taken = [f for f in remaining if tier(rows[f]) <= min(full)]
        if not taken:
            return chosen
        chosen += taken
        merged += sum(rows[f] for f in taken)
        remaining = [f for f in remaining if f not in taken]


def row_keys(files: list[Path], table: Table) -> list[RowKey]:
    """The key of every row of `files`, duplicates included (reads only the key columns)."""
    import pyarrow.parquet as pq

    keys: list[RowKey] = []
    for file in files:
        part = pq.read_table(file, columns=list(table.key))
        keys.extend(zip(*(part.column(c).to_pylist() for c in table.key)))
    return keys


def _merge(files: list[Path], known: set[RowKey], table: Table) -> pa.Table:
    """The rows of `files` (older files read under today's schema: columns added later are null), each
    identity once (its first-written copy), none of `known`, sorted by id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mai.storage.parquet import arrow_array

    tables = [pq.read_table(f, schema=table.schema) for f in files]  # missing columns null, unknown ones dropped
    merged = pa.concat_tables(tables) if tables else table.schema.empty_table()
    merged = merged.sort_by([*((c, "ascending") for c in table.key), ("created_at", "ascending")])
    keys = list(zip(*(merged.column(c).to_pylist() for c in table.key)))
    keep = [key != (keys[n - 1] if n else None) and key not in known for n, key in enumerate(keys)]
    return merged.filter(arrow_array(keep, pa.bool_()))


def _publish_next(partition: Partition, snapshot: list[Path], kept: list[Path], merged: pa.Table) -> int:
    from mai.storage.parquet import write_table

    current = partition.current()
    assert current is not None
    version = partition.versions / f"v{_sequence(current) + 1:06d}"
    shutil.rmtree(version, ignore_errors=True)  # an earlier compaction that died before publishing it
    version.mkdir(parents=True)
    if merged.num_rows:
        write_table(version / f"{COMPACTED_PREFIX}{uuid.uuid4().hex}.parquet", merged, ROW_GROUP_ROWS)
    for file in kept:
        os.link(file, version / file.name)
    with _flock(partition.write_lock, exclusive=True):
        for late in sorted(set(current.glob("*.parquet")) - set(snapshot)):  # written while we merged
            os.link(late, version / late.name)
        partition._publish(version)
    (current / ".retired").write_text(str(time.time()))
    return len(list(version.glob("*.parquet")))


def _sequence(version: Path) -> int:
    return int(version.name[1:]) if version.name.startswith("v") and version.name[1:].isdigit() else -1


def _adopt_legacy_directory(partition: Partition) -> None:
    """A partition written before versions existed (a real directory) becomes version 0. Writers are held off
    by the write lock; a reader listing the table in that instant may miss the partition, never fail."""
    if partition.path.is_symlink() or not partition.path.is_dir():
        return
    with _flock(partition.write_lock, exclusive=True):
        first = partition.versions / "v000000"
        first.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partition.path, first)
        partition._publish(first)


def _remove_old_versions(partition: Partition, grace_s: float) -> list[str]:
    """Versions after the published one were never published (a compaction died): removed now. Versions
    before it are removed once retired for `grace_s`."""
    current = partition.current()
    if current is None or not partition.versions.exists():
        return []
    removed = []
    for version in sorted(partition.versions.glob("v*")):
        if version == current:
            continue
        retired = version / ".retired"
        since = float(retired.read_text() or 0) if retired.exists() else version.stat().st_mtime
        if _sequence(version) > _sequence(current) or time.time() - since > grace_s:
            shutil.rmtree(version, ignore_errors=True)
            removed.append(version.name)
    return removed


def count_small_files(partition: Partition) -> int:
    """Batch files not yet compacted (by name: no footer is read)."""
    current = partition.current()
    return len(list(current.glob("part-*.parquet"))) if current else 0
