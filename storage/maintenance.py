"""Keeping a store healthy: compaction of every partition, per-table statistics, verification."""

from __future__ import annotations

import json
import stat
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pyarrow as pa
import pyarrow.parquet as pq
from mai.storage.catalog import build_catalog
from mai.storage.partitions import (
    AUTO_MIN_SMALL_FILES,
    GRACE_S,
    Compaction,
    Partition,
    compact,
    count_small_files,
    partitions,
    row_keys,
    table_files,
)
from mai.storage.paths import Home
from mai.storage.split_check import runs_reading_another_split
from mai.storage.tables import CONTENT_ADDRESSED, TABLES, Table, TableName, table_named

TEMP_AGE_S = 600.0  # a temp file older than this belongs to a writer that died


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
    done = []
    for table in CONTENT_ADDRESSED:
        for partition in partitions(home, table):
            if partition.path in directories and count_small_files(partition) >= AUTO_MIN_SMALL_FILES:
                done.append(compact(partition, table, min_small_files=AUTO_MIN_SMALL_FILES, tiered=True))
    return _recatalogued(home, done)


@dataclass
class TableStats:
    table: TableName
    files: int = 0
    rows: int = 0
    bytes: int = 0
    partitions: int = 0


def store_stats(home: Home) -> list[TableStats]:
    """Rows (from the files' footers), files and bytes per table (`mai store stats`)."""
    stats = []
    for table in TABLES:
        files = table_files(home, table)
        stats.append(TableStats(table.name, len(files), sum(pq.ParquetFile(f).metadata.num_rows for f in files),
                                sum(f.stat().st_size for f in files), len(partitions(home, table))))
    return stats


class VerificationRecord(TypedDict):
    """A store's verification (`mai store verify`, `--json`): a problem makes the command exit non-zero."""

    problems: list[str]
    notes: list[str]
    checked_files: int


def verify_store(home: Home) -> VerificationRecord:
    """Schemas, unique identities, manifests consistent with files, no orphan temp files or versions
    (`mai store verify`)."""
    files = {table.name: table_files(home, table) for table in TABLES}
    problems = [problem for table in TABLES for path in files[table.name]
                if (problem := _schema_problem(path, table.schema))]
    for table in CONTENT_ADDRESSED:
        for partition in partitions(home, table):
            problems += _duplicate_problems(partition, table) + _orphan_versions(partition)
    problems += _run_problems(home, files) + _orphan_temp_files(home) + _catalog_problem(home)
    problems += [mismatch.problem() for mismatch in runs_reading_another_split(home)]
    stale = list(home.claims.glob("*/*.claim")) if home.claims.exists() else []
    notes = [f"{len(stale)} claim files (live runs, or dead ones that the next claim clears)"] if stale else []
    return {"problems": problems, "notes": notes, "checked_files": sum(len(found) for found in files.values())}


def _schema_problem(path: Path, schema: pa.Schema) -> str | None:
    """A file may lack columns added later (they read as NULL); a column it has must have the schema's type."""
    try:
        found = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as error:
        return f"{path}: unreadable ({error})"
    wrong = [f"{f.name}: {f.type} (expected {schema.field(f.name).type})" for f in found
             if f.name in schema.names and not f.type.equals(schema.field(f.name).type)]
    unknown = [f.name for f in found if f.name not in schema.names]
    if wrong or unknown:
        return f"{path}: columns of the wrong type {wrong}, unknown columns {unknown}"
    return None


def _duplicate_problems(partition: Partition, table: Table) -> list[str]:
    repeated = [key for key, n in Counter(row_keys(partition.files(), table)).items() if n > 1]
    if not repeated:
        return []
    return [(f"{partition.path}: {len(repeated)} identities stored more than once (e.g. {repeated[0]}); "
             "`mai store compact` removes them")]


def _orphan_versions(partition: Partition) -> list[str]:
    current = partition.current()
    if current is None or not partition.versions.exists() or not partition.path.is_symlink():
        return []
    return [f"{version}: a version no compaction published (its compaction died); the next one removes it"
            for version in partition.versions.glob("v*") if version.name > current.name]


def _run_problems(home: Home, files: dict[TableName, list[Path]]) -> list[str]:
    problems = []
    generated = {key[0] for key in row_keys(files["generations"], table_named("generations"))}
    for run_file in files["runs"]:
        run_id = run_file.parent.name
        manifest_path = run_file.parent / "manifest.json"
        routes_path = home.routes / run_id / "routes.parquet"
        if not manifest_path.exists() or not routes_path.exists():
            problems.append(f"run {run_id}: complete (run.parquet) but its manifest or routes file is missing")
            continue
        manifest = json.loads(manifest_path.read_text())
        missing_shards = [s for s in manifest.get("shard_paths", []) if not (home.root / s).exists()]
        if missing_shards:
            problems.append(f"run {run_id}: {len(missing_shards)} sample shards of its manifest are missing")
        finals = pq.read_table(routes_path, columns=["final_gen_id"]).column(0).to_pylist()
        lost = [g for g in finals if g and g not in generated]
        if lost:
            problems.append(f"run {run_id}: {len(lost)} final generations are not in the store")
    return problems


def _orphan_temp_files(home: Home) -> list[str]:
    return [f"{p}: a temp file its writer left (killed mid-write, or the disk was full); `mai store verify "
            f"--repair` removes it" for p in orphan_temp_files(home)]


def orphan_temp_files(home: Home, age_s: float = TEMP_AGE_S) -> list[Path]:
    """Temp files (`.tmp-*`: batch files, manifests, the catalog, partition links) anywhere under the store root
    that no live writer can still own: older than `age_s` (a writer renames its temp file within seconds)."""
    if not home.root.is_dir():
        return []
    now, found = time.time(), set()
    for path in home.root.rglob(".tmp-*"):
        try:
            status = path.lstat()
        except FileNotFoundError:  # renamed into place meanwhile
            continue
        if (stat.S_ISREG(status.st_mode) or stat.S_ISLNK(status.st_mode)) and now - status.st_mtime > age_s:
            found.add(path)
    return sorted(found)


def remove_orphan_temp_files(home: Home, age_s: float = TEMP_AGE_S) -> list[Path]:
    """Delete what `orphan_temp_files` finds (`mai store verify --repair`); returns what was removed."""
    removed = []
    for path in orphan_temp_files(home, age_s):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _catalog_problem(home: Home) -> list[str]:
    """The catalog file must be a DuckDB database (its header names it at bytes 8-12): anything else there (a
    report written over it) breaks every notebook that opens it."""
    if not home.catalog.exists():
        return []
    try:
        with home.catalog.open("rb") as handle:
            header = handle.read(12)
    except OSError as error:
        return [f"{home.catalog}: unreadable ({error.strerror or error}); `mai catalog` rebuilds it"]
    if header[8:12] != b"DUCK":
        return [f"{home.catalog}: not a DuckDB database; `mai catalog` rebuilds it"]
    return []
