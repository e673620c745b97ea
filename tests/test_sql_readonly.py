"""`mai sql` is read-only over the store: statements that write, attach, configure or load are refused before
they run, table functions read only the store's files, and the store's bytes never change. Ordinary SELECTs and
every saved dashboard query still answer. A real tiny run builds the store (real DuckDB, no mocks)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest

from mai.cli import main
from mai.dashboards.saved import list_saved, load_saved
from mai.errors import ConfigError
from mai.storage.catalog import VIEW_NAMES, build_catalog, connect, query
from mai.storage.latency import read_run_calls
from mai.storage.paths import Home
from tests.helpers import seeded_store

RUN = ["run", "--local", "--limit", "6", "--max-new-tokens", "S=6", "--max-new-tokens", "R=12",
       "--max-new-tokens", "RT=6", "--max-new-tokens", "S2=6"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> Home:
    """One completed run (and its catalog file) shared by the module's tests: none of them may change it."""
    root = tmp_path_factory.mktemp("sql-readonly") / "home"
    seeded_store(root, assets_home)
    assert main(["--home", str(root), *RUN]) == 0
    home = Home.at(root)
    build_catalog(home)
    return home


def fingerprint(root: Path) -> dict[str, str]:
    """sha256 of every file under the store root (catalog file, Parquet store, models, datasets)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def one(pattern: str, home: Home) -> str:
    (path,) = sorted(home.root.glob(pattern))[:1]
    return path.as_posix()


def hostile(home: Home) -> dict[str, str]:
    metrics, routes, catalog = one("store/metrics/*/*.parquet", home), one("store/routes/*/routes.parquet", home), \
        home.catalog.as_posix()
    return {
        "copy over a metrics file": f"COPY (SELECT 1 AS x) TO '{metrics}' (FORMAT parquet)",
        "copy an empty routes table": f"COPY (SELECT * FROM routes WHERE false) TO '{routes}' (FORMAT parquet)",
        "select, then copy": f"SELECT 1; COPY (SELECT 1 AS x) TO '{metrics}' (FORMAT parquet)",
        "attach and drop a view": f"ATTACH '{catalog}' AS c; DROP VIEW c.runs",
        "attach": f"ATTACH '{catalog}' AS c",
        "detach": "DETACH memory",
        "create table": "CREATE TABLE t AS SELECT * FROM runs",
        "create view": "CREATE OR REPLACE VIEW runs AS SELECT 1 AS run_id",
        "insert": "INSERT INTO runs SELECT * FROM runs",
        "update": "UPDATE runs SET run_name = 'x'",
        "delete": "DELETE FROM runs",
        "drop view": "DROP VIEW runs",
        "set external access": "SET enable_external_access = true",
        "set allowed directories": "SET allowed_directories = ['/']",
        "reset allowed directories": "RESET allowed_directories",
        "unlock": "SET lock_configuration = false",
        "set variable": "SET VARIABLE x = 1",
        "pragma": "PRAGMA database_list",
        "pragma version": "PRAGMA version",
        "call": "CALL pragma_database_list()",
        "checkpoint": "CHECKPOINT",
        "install": "INSTALL httpfs",
        "load": "LOAD httpfs",
        "export": f"EXPORT DATABASE '{home.root.as_posix()}/store/dump'",
        "import": f"IMPORT DATABASE '{home.root.as_posix()}/store'",
        "explain analyze copy": f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{metrics}' (FORMAT parquet)",
        "prepare": "PREPARE p AS SELECT 1",
        "transaction": "BEGIN TRANSACTION",
        "pivot statement": "PIVOT runs ON mode",
        "vacuum": "VACUUM",
    }


def test_statements_that_are_not_select_are_refused_and_change_no_byte(store: Home) -> None:
    before = fingerprint(store.root)
    statements = hostile(store)
    for label, sql in statements.items():
        with pytest.raises(ConfigError, match="only SELECT queries are allowed") as refused:
            query(store, sql)
        assert "refused a" in str(refused.value), label
    assert fingerprint(store.root) == before
    assert not (store.root / "store" / "dump").exists()


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')",
    "SELECT * FROM read_text('{root}/catalog.duckdb')",              # beside the store, not in it
    "SELECT * FROM glob('{root}/models/**')",
    "SELECT * FROM read_text('{root}/store/../catalog.duckdb')",     # climbing out of the store
    "SELECT * FROM read_csv('{root}/store2/x.csv')",                 # a sibling sharing the prefix
])
def test_table_functions_read_nothing_outside_the_store(store: Home, sql: str) -> None:
    before = fingerprint(store.root)
    with pytest.raises(ConfigError, match="SQL error: .*Permission Error"):
        query(store, sql.format(root=store.root.as_posix()))
    assert fingerprint(store.root) == before


def test_the_connection_itself_is_locked(store: Home) -> None:
    """The second layer: even a statement that got past the type check could not lift the restrictions."""
    with connect(store) as connection:
        for setting in ("SET enable_external_access = true", "RESET allowed_directories",
                        "SET lock_configuration = false", "SET autoload_known_extensions = true"):
            with pytest.raises(duckdb.Error, match="configuration has been locked"):
                connection.execute(setting)
        with pytest.raises(duckdb.Error, match="Permission Error"):
            connection.execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
        with pytest.raises(duckdb.Error):
            connection.execute("LOAD httpfs")
        settings = dict(connection.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', 'lock_configuration',"
            " 'allowed_directories', 'autoload_known_extensions', 'autoinstall_known_extensions')").fetchall())
    assert settings["enable_external_access"] == "false" and settings["lock_configuration"] == "true"
    assert settings["autoload_known_extensions"] == "false" == settings["autoinstall_known_extensions"]
    assert f"{store.root.as_posix()}/store/" in settings["allowed_directories"]


def test_ordinary_selects_and_every_saved_query_still_answer(store: Home) -> None:
    before = fingerprint(store.root)
    for view in VIEW_NAMES:
        columns, rows = query(store, f"SELECT count(*) AS n FROM {view}")
        assert columns == ["n"] and rows[0][0] >= 0
    assert query(store, "SELECT count(*) FROM runs")[1] == [(1,)]
    assert query(store, "SELECT count(*) FROM routes")[1] == [(6,)]
    run_id = query(store, "FROM runs SELECT run_id")[1][0][0]
    # WITH, DESCRIBE, SUMMARIZE, UNPIVOT, several SELECTs (the last answers), and reading store files directly
    assert query(store, "WITH r AS (SELECT * FROM routes) SELECT count(DISTINCT run_id) FROM r")[1] == [(1,)]
    assert "run_id" in [row[0] for row in query(store, "DESCRIBE runs")[1]]
    assert query(store, "SUMMARIZE metrics")[1]
    assert query(store, "SELECT 1 AS a; SELECT 2 AS b") == (["b"], [(2,)])
    direct = f"SELECT count(*) FROM read_parquet('{store.root.as_posix()}/store/routes/*/routes.parquet')"
    assert query(store, direct)[1] == [(6,)]
    assert len(read_run_calls(store, run_id)) > 0  # an UNPIVOT over routes, as `mai estimate` uses it
    for name, _ in list_saved():
        columns, _rows = query(store, load_saved(name))
        assert columns, name
    assert fingerprint(store.root) == before


def test_mai_sql_reports_a_refusal_as_an_error(store: Home, capsys: pytest.CaptureFixture[str]) -> None:
    before = fingerprint(store.root)
    metrics = one("store/metrics/*/*.parquet", store)
    assert main(["--home", str(store.root), "sql", f"COPY (SELECT 1 AS x) TO '{metrics}' (FORMAT parquet)"]) == 2
    assert "only SELECT queries are allowed" in capsys.readouterr().err
    assert main(["--home", str(store.root), "sql", "SELECT * FROM read_csv('/etc/passwd')"]) == 2
    assert "Permission Error" in capsys.readouterr().err
    assert main(["--home", str(store.root), "sql", "SELECT count(*) AS n FROM runs", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "1"]
    assert fingerprint(store.root) == before


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment", "SELEC 1"])
def test_empty_or_broken_sql_is_a_config_error(store: Home, sql: str) -> None:
    with pytest.raises(ConfigError):
        query(store, sql)
