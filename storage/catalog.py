"""The DuckDB catalog: views over the Parquet files, nothing else. It can be dropped and rebuilt from the
files at any time (`build_catalog`). `mai sql` uses an in-memory database with the same views, so a query
never takes the catalog file's lock and never blocks a running pipeline.

Queries are read-only over the store (`connect`, `query`), in two layers:
- `query` runs only SELECT statements (`duckdb.extract_statements`, statement type SELECT: this covers
  WITH, FROM-first, VALUES, UNPIVOT, DESCRIBE, SHOW, SUMMARIZE) and executes exactly the statements it
  checked. Anything else (COPY, ATTACH, DETACH, CREATE, INSERT, UPDATE, DELETE, DROP, SET / RESET, PRAGMA,
  CALL, INSTALL / LOAD, EXPORT / IMPORT, EXPLAIN, PREPARE / EXECUTE, transactions, PIVOT statements, which
  DuckDB runs as several statements) is refused with a ConfigError before anything runs. The type check is
  what stops writes: DuckDB's settings below still let COPY ... TO and ATTACH reach an allowed directory.
- `connect` creates the views, then restricts the connection with DuckDB's own settings (DuckDB 1.3 to
  2.0): `allowed_directories = ['<root>/store/']` and `enable_external_access = false`, so table functions
  (read_csv, read_text, read_blob, glob, read_parquet, ...) read only the store's files: not /etc/passwd,
  not the catalog file, models or datasets, not a URL (DuckDB adds its own temporary-file directory to the
  allowed list, for spilling); `autoinstall_known_extensions = false` and `autoload_known_extensions = false`,
  so no extension is fetched or loaded (enable_external_access already refuses INSTALL and LOAD); and last
  `lock_configuration = true`, so no later SET or RESET can undo any of it."""

from __future__ import annotations

import glob
import os
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
from mai.storage.partitions import partitions
from mai.storage.paths import Home
from mai.storage.tables import TABLES, Table

from mai.errors import ConfigError

VIEW_NAMES = tuple(t.name for t in TABLES)  # one view per table, named after it


def _duckdb_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_list(arrow_type):
        return _duckdb_type(arrow_type.value_type) + "[]"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMPTZ" if arrow_type.tz else "TIMESTAMP"
    simple = {pa.string(): "VARCHAR", pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.float64(): "DOUBLE",
              pa.bool_(): "BOOLEAN"}
    return simple[arrow_type]


def _empty_relation(schema: pa.Schema) -> str:
    columns = ", ".join(f"CAST(NULL AS {_duckdb_type(f.type)}) AS {f.name}" for f in schema)
    return f"SELECT {columns} WHERE false"


def _over_files(pattern: Path, schema: pa.Schema) -> str:
    """`union_by_name` keeps old files readable when a later version adds columns."""
    if not glob.glob(str(pattern)):
        return _empty_relation(schema)
    return f"SELECT * FROM read_parquet('{pattern.as_posix()}', union_by_name = true)"


def _over_partitions(home: Home, table: Table) -> str:
    """The published version of each partition, by its version directory (storage/partitions.py): a view keeps
    reading the version it was made over even when a compaction publishes the next one meanwhile."""
    patterns = [(p.current() or p.path) / "*.parquet" for p in partitions(home, table) if p.files()]
    if not patterns:
        return _empty_relation(table.schema)
    listed = ", ".join("'" + pattern.as_posix().replace("'", "''") + "'" for pattern in patterns)
    return f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"


def view_definition(home: Home, table: Table) -> str:
    """A content-addressed table is read plainly (a query reads only the columns it touches): identities are
    claimed, so each is written once, and compaction removes the duplicates of older stores."""
    if table.content_addressed:
        relation = _over_partitions(home, table)
    else:
        relation = _over_files(home.table_dir(table.name) / table.files, table.schema)
    if table.full_schema_view:  # BY NAME over the full schema: columns added later are NULL in older files
        relation = f"SELECT * FROM ({_empty_relation(table.schema)} UNION ALL BY NAME {relation})"
    if table.keep_first_by:
        keys = ", ".join(table.key)
        relation = (f"SELECT * FROM ({relation}) "
                    f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {table.keep_first_by}) = 1")
    if table.per_run:  # a run killed before its `runs` row does not count
        relation = f"SELECT * FROM ({relation}) WHERE run_id IN (SELECT run_id FROM runs)"
    return relation


def view_definitions(home: Home) -> dict[str, str]:
    """Each table's view, in the registry's order (a view is created after the views it reads)."""
    return {table.name: view_definition(home, table) for table in TABLES}


def _create_views(connection: duckdb.DuckDBPyConnection, home: Home) -> None:
    for name, query in view_definitions(home).items():
        connection.execute(f"CREATE OR REPLACE VIEW {name} AS {query}")


def build_catalog(home: Home) -> Path:
    """(Re)create the catalog file's views. Safe to run at any time, by any number of runs at once: the views
    are written to a new file that then replaces the catalog (`os.replace`), so no run ever takes the catalog
    file's lock, and a notebook that holds the old file open keeps its views (it sees new tables once it
    reconnects). It holds no data."""
    home.root.mkdir(parents=True, exist_ok=True)
    temp = home.catalog.with_name(f".tmp-{uuid.uuid4().hex}-{home.catalog.name}")
    try:
        with duckdb.connect(str(temp)) as connection:
            _create_views(connection, home)
        os.replace(temp, home.catalog)
    finally:
        temp.unlink(missing_ok=True)
        temp.with_name(temp.name + ".wal").unlink(missing_ok=True)
    return home.catalog


def connect(home: Home) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the catalog's views, for queries; it can read only the store's files and its
    settings are locked (module docstring)."""
    connection = duckdb.connect(":memory:")
    _create_views(connection, home)
    _restrict(connection, home.root / "store")
    return connection


def _restrict(connection: duckdb.DuckDBPyConnection, store: Path) -> None:
    allowed = _sql_string(store.as_posix().rstrip("/") + "/")  # a directory prefix: not also store2/
    for setting in (f"SET allowed_directories = [{allowed}]", "SET enable_external_access = false",
                    "SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false",
                    "SET lock_configuration = true"):
        connection.execute(setting)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def read_only_statements(sql: str) -> list[duckdb.Statement]:
    """The statements of `sql`, each checked to be a SELECT; a ConfigError names the first that is not."""
    try:
        statements = duckdb.extract_statements(sql)
    except (duckdb.Error, ValueError) as error:  # ValueError: a statement type the Python API has no name for
        raise ConfigError(f"SQL error: {error}") from error
    if not statements:
        raise ConfigError("the query holds no SQL statement")
    for statement in statements:
        if statement.type != duckdb.StatementType.SELECT:
            kind = statement.type.name
            raise ConfigError(f"only SELECT queries are allowed over the store (read-only); refused a {kind} "
                              f"statement: {_excerpt(statement.query)}")
    return statements


def _excerpt(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def query(home: Home, sql: str) -> tuple[list[str], list[tuple[object, ...]]]:
    """(columns, rows) of the last statement; `sql` holds SELECT statements only (module docstring). An error
    DuckDB reports, such as a file outside the store, a missing column or a syntax error, is a ConfigError."""
    statements = read_only_statements(sql)
    with connect(home) as connection:
        try:
            for statement in statements:
                cursor = connection.execute(statement)
            columns = [d[0] for d in cursor.description] if cursor.description else []
            return columns, cursor.fetchall()
        except duckdb.Error as error:
            raise ConfigError(f"SQL error: {error}") from error


def final_generations(home: Home, run_id: str, scorer_profile: str) -> list[tuple[str, str, str, float]]:
    """(sample_id, prompt kind, text, score) of each scored sample's final generation in a run, under one scorer
    profile (a re-scored run holds one score per profile). Joined through the run's scores: a generation
    reused from the cache keeps the run_id of the run that first made it, so generations filtered by run_id
    would miss it."""
    with connect(home) as connection:
        return connection.execute(
            "SELECT s.sample_id, g.prompt_kind, g.text, s.score FROM scores s "
            "JOIN generations g ON g.gen_id = s.final_gen_id WHERE s.run_id = ? AND s.scorer_profile = ? "
            "ORDER BY s.sample_id", [run_id, scorer_profile]).fetchall()
