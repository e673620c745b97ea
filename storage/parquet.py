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


def read_columns(paths: Sequence[Path], columns: list[str], key: str | None = None,
                 wanted: Sequence[str] | None = None) -> pa.Table:
    """The `columns` of the files as one table (a column a file lacks, as an older schema, is null there), with
    only the rows whose `key` is in `wanted` when both are given. Read file by file with the Parquet reader alone:
    `pyarrow.dataset` imports pandas, a third of a cached run's start-up (docs/benchmarks.md, "Startup")."""
    import pyarrow.compute as pc  # here: the catalog (and so `mai sql`) imports this module, not compute

    tables = []
    for path in paths:
        parquet = pq.ParquetFile(path)
        present = set(parquet.schema_arrow.names)
        table = parquet.read(columns=[c for c in columns if c in present])
        if key is not None and wanted is not None:
            table = table.filter(pc.is_in(table[key].cast(pa.string()), value_set=pa.array(wanted, pa.string())))
        tables.append(table)
    if not tables:
        return pa.table({c: pa.array([], pa.string()) for c in columns})
    return pa.concat_tables(tables, promote_options="default")
