"""Atomic Parquet writes with explicit schemas. Files are immutable once renamed into place."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_rows(path: Path, rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> Path:
    """`rows` by column name (typically a row type of schemas.py), typed by `schema`. Write to a temp name in
    the same directory, fsync, then `os.replace`: a reader (or a run killed mid-write) sees either the whole
    file or none. The temp name does not end in `.parquet`, so no `*.parquet` glob (ours or DuckDB's) ever
    picks up a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    temp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}.partial"
    pq.write_table(table, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return path


def write_table(path: Path, table: pa.Table, row_group_size: int) -> Path:
    """`write_rows` for a table already in memory (compaction), with row groups of `row_group_size` rows."""
    temp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}.partial"
    pq.write_table(table, temp, row_group_size=row_group_size)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return path


def new_part_path(directory: Path) -> Path:
    return directory / f"part-{uuid.uuid4().hex}.parquet"


def read_rows(paths: list[Path], columns: list[str] | None = None) -> list[dict[str, object]]:
    """Rows by column name, of any table (a reader of one table reads them as its row type of schemas.py)."""
    rows: list[dict[str, object]] = []
    for path in paths:
        rows.extend(pq.read_table(path, columns=columns).to_pylist())
    return rows
