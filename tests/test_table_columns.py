"""Each table's columns are decided once (storage/rows.py), named as DuckDB types so that the catalog's views need
no pyarrow (`mai sql`); the Arrow schema its files are written with is translated from them (storage/schemas.py).
DuckDB must read a file written with that schema as exactly those columns, and the catalog's view of a table
with no files yet must show them too."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from mai.storage.catalog import connect
from mai.storage.paths import Home
from mai.storage.tables import TABLES, Table

NAMES = [t.name for t in TABLES]


def _described(connection: duckdb.DuckDBPyConnection, relation: str) -> list[tuple[str, str]]:
    return [(row[0], row[1]) for row in connection.execute(f"DESCRIBE {relation}").fetchall()]


@pytest.mark.parametrize("table", TABLES, ids=NAMES)
def test_duckdb_reads_a_file_of_the_arrow_schema_as_the_tables_columns(table: Table, tmp_path: Path) -> None:
    empty = tmp_path / f"{table.name}.parquet"
    pq.write_table(table.schema.empty_table(), empty)
    with duckdb.connect() as connection:
        assert _described(connection, f"SELECT * FROM read_parquet('{empty}')") == list(table.columns)


def test_the_catalogs_views_over_no_files_have_the_tables_columns(tmp_path: Path) -> None:
    home = Home.at(tmp_path / "store")
    with connect(home) as connection:
        for table in TABLES:
            assert _described(connection, table.name) == list(table.columns), table.name
