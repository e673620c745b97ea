"""Keeping a store healthy: compaction of every partition, per-table statistics (verification: storage/verify.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mai.storage.catalog import build_catalog
from mai.storage.parquet import reading
from mai.storage.partitions import (
    AUTO_MIN_SMALL_FILES,
    GRACE_S,
    Compaction,
    compact,
    count_small_files,
    partitions,
    table_files,
)
from mai.storage.paths import Home
from mai.storage.tables import CONTENT_ADDRESSED, TABLES, TableName


def compact_store(home: Home, min_small_files: int = 2, grace_s: float = GRACE_S) -> list[Compaction]:
    """Compacts every partition of every content-addressed table (`mai store compact`)."""
    return _recatalogued(home, [compact(p, table, min_small_files=min_small_files, grace_s=grace_s)
                                for table in CONTENT_ADDRESSED for p in partitions(home, table)])


def _recatalogued(home: Home, reports: list[Compaction]) -> list[Compaction]:
    """The catalog file's views name the partitions' versions: after publishing new ones, rebuild it (a session
    holding the old file keeps reading the retired versions, which stay GRACE_S, until it reconnects)."""
    if any(not r.skipped for r in reports):
        build_catalog(home)
    return reports


def auto_compact(home: Home, directories: set[Path]) -> list[Compaction]:
    """What the end of a run does: compacts the partitions it wrote to that hold many batch files (cheap to
    check: file names only), so a store's file count stays bounded without anyone running a command."""
    return _recatalogued(home, [compact(partition, table, min_small_files=AUTO_MIN_SMALL_FILES, tiered=True)
                                for table in CONTENT_ADDRESSED for partition in partitions(home, table)
                                if partition.path in directories
                                and count_small_files(partition) >= AUTO_MIN_SMALL_FILES])


@dataclass
class TableStats:
    table: TableName
    files: int = 0
    rows: int = 0
    bytes: int = 0
    partitions: int = 0


def store_stats(home: Home) -> list[TableStats]:
    """Rows (from the files' footers), files and bytes per table (`mai store stats`), of the readable files (the
    command notes any other: storage/damage.py)."""
    stats = []
    for table in TABLES:
        files = table_files(home, table)
        stats.append(TableStats(table.name, len(files), sum(_rows(f) for f in files),
                                sum(f.stat().st_size for f in files), len(partitions(home, table))))
    return stats


def _rows(path: Path) -> int:
    with reading(path) as parquet:
        return int(parquet.metadata.num_rows)
