"""The store under hostile paths and hostile queries: any home path works (quotes, brackets, glob characters,
spaces, unicode), `mai sql` stops a runaway query and reads nothing outside the store, `mai report --out` writes only
regular files outside the store's own files, `mai store verify` finds (and repairs) orphan temp files and a catalog
that is not a database, and expected failures are one line without a traceback. One real run, real DuckDB."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from mai import api
from mai.cli import main
from mai.errors import ConfigError
from mai.storage.catalog import VIEW_NAMES, build_catalog
from mai.storage.paths import Home
from tests.helpers import seeded_store

# the module's fixtures build stores of many runs: the full suite's, not the fast tier's
pytestmark = pytest.mark.slow

RUN = ["run", "--local", "--limit", "6", "--max-new-tokens", "S=6", "--max-new-tokens", "R=12",
       "--max-new-tokens", "RT=6", "--max-new-tokens", "S2=6"]
ODD_NAMES = ["store'b", "a[1]", "x*y?", "with space", "ünïcødé ☃", "semi;colon -- x", "[!q]{a,b}", "jb\\[x",
             "back\\slash*[q]?"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> Home:
    root = tmp_path_factory.mktemp("hardening") / "home"
    seeded_store(root, assets_home)
    assert main(["--home", str(root), *RUN]) == 0
    return Home.at(root)


def counts(home: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    for view in VIEW_NAMES:
        (row,) = api.query(home, f"SELECT count(*) FROM {view}")[1]
        found[view] = int(str(row[0]))
    return found


@pytest.mark.parametrize("name", ODD_NAMES)
def test_any_home_path_reads_the_same_store(store: Home, tmp_path: Path, name: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / name / "home"
    shutil.copytree(store.root / "store", odd / "store", symlinks=True)  # partition links are relative
    (tmp_path / name / "decoy").mkdir()  # what a pasted glob would also match (`x*y?`, `[!q]`)
    expected = counts(store.root)
    assert expected["routes"] == 6 and expected["generations"] > 0
    assert counts(odd) == expected
    catalog = build_catalog(Home.at(odd))
    plain = tmp_path / "catalog.duckdb"  # DuckDB cannot open a database file under a path with '?' (docs)
    shutil.copyfile(catalog, plain)
    with duckdb.connect(str(plain), read_only=True) as connection:
        assert connection.execute("SELECT count(*) FROM routes").fetchall() == [(6,)]
    assert main(["--home", str(odd), "sql", "SELECT count(*) AS n FROM routes", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "6"]


def test_a_cached_run_under_a_home_with_a_backslash_and_a_bracket_completes(store: Home, tmp_path: Path) -> None:
    """It stored its run and then failed building the catalog (exit 1): DuckDB reads a backslash as a separator."""
    odd = Home.at(tmp_path / "jb\\[x" / "home")
    for folder in ("store", "models", "datasets"):
        shutil.copytree(store.root / folder, odd.root / folder, symlinks=True)
    assert main(["--home", str(odd.root), *RUN]) == 0
    plain = tmp_path / "catalog.duckdb"  # DuckDB opens no database file under a path with a backslash
    shutil.copyfile(build_catalog(odd), plain)
    with duckdb.connect(str(plain), read_only=True) as connection:
        assert connection.execute("SELECT count(DISTINCT run_id) FROM routes").fetchall() == [(2,)]


def test_sql_stops_at_its_timeout_and_memory_limit(store: Home, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="stopped after 1 s"):
        api.query(store.root, "SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b", timeout_s=1)
    assert time.perf_counter() - started < 15
    with pytest.raises(ConfigError, match="more memory than its limit"):
        api.query(store.root, "SELECT list(range) FROM range(200000000)", memory_limit="200MB")
    assert main(["--home", str(store.root), "sql", "SELECT count(*) FROM range(300000) a, range(300000) b",
                 "--timeout", "0.5"]) == 2
    assert "--timeout" in capsys.readouterr().err
    assert main(["--home", str(store.root), "sql", "SELECT 1", "--memory-limit", "lots"]) == 2
    assert "is not a size" in capsys.readouterr().err


@pytest.mark.parametrize("sql", ["UPDATE EXTENSIONS", "SELECT '\udcff'"])
def test_refused_and_undecodable_statements_are_config_errors(store: Home, sql: str) -> None:
    with pytest.raises(ConfigError):
        api.query(store.root, sql)


def test_sql_cannot_read_the_callers_working_directory(store: Home, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret.txt").write_text("secret")
    monkeypatch.chdir(tmp_path)
    for sql in ("SELECT content FROM read_text('.tmp/secret.txt')",
                f"SELECT content FROM read_text('{tmp_path}/.tmp/secret.txt')"):
        with pytest.raises(ConfigError, match="Permission Error"):
            api.query(store.root, sql)


@pytest.mark.parametrize("out", ["/dev/full", "/dev/null", "DIR", "CATALOG", "STORE_FILE", "HIDDEN"])
def test_report_out_refuses_devices_directories_and_the_stores_files(store: Home, tmp_path: Path, out: str) -> None:
    build_catalog(store)
    named = {"DIR": str(tmp_path), "CATALOG": str(store.catalog), "HIDDEN": str(store.root / ".x.html"),
             "STORE_FILE": str(store.root / "store" / "report.html")}.get(out, out)
    before = store.catalog.read_bytes()
    with pytest.raises(ConfigError, match="--out"):
        api.report(out=named, home=store.root)
    assert store.catalog.read_bytes() == before
    assert not list(tmp_path.glob(".tmp-*"))
    assert Path("/dev/full").is_char_device() and Path("/dev/null").is_char_device()
    assert api.store_verify(store.root)["problems"] == []


def test_report_beside_the_store_and_a_full_disk(store: Home, tmp_path: Path) -> None:
    written = api.report(out=store.root / "report.html", home=store.root)
    assert Path(written["path"]).stat().st_size > 1000
    api.report(out=store.root / "report.html", home=store.root)  # a previous report is replaced
    link = tmp_path / "full.html"
    link.symlink_to("/dev/full")  # a link to a device is refused, as every link is
    with pytest.raises(ConfigError, match="symbolic link"):
        api.report(out=link, home=store.root)


@pytest.mark.parametrize("points_to", ["/proc/self/fd/1", "/dev/stdout", "FILE", "MISSING"])
def test_report_out_never_replaces_a_symbolic_link(store: Home, tmp_path: Path, points_to: str) -> None:
    """A link to stdout's file (what /dev/stdout is), to a regular file or to nothing: renaming the report into
    place would replace the link itself (rc 0, the link gone); each is refused and stays a link."""
    (tmp_path / "file.html").write_text("kept")
    target = {"FILE": str(tmp_path / "file.html"), "MISSING": str(tmp_path / "missing.html")}.get(points_to, points_to)
    link = tmp_path / "link.html"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link.*--out -"):
        api.report(out=link, home=store.root)
    assert link.is_symlink() and os.readlink(link) == target
    assert (tmp_path / "file.html").read_text() == "kept" and not (tmp_path / "missing.html").exists()
    with pytest.raises(ConfigError, match="symbolic link"):
        api.report(out="/dev/stdout", home=store.root)


def test_report_out_dash_writes_the_page_to_stdout_and_the_summary_to_stderr(
        store: Home, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--home", str(store.root), "report", "--out", "-"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert err.startswith("-: 1 runs") and not list(tmp_path.iterdir())  # no file named '-' or temp file


def test_report_out_dot_slash_dash_writes_a_file_named_dash(
        store: Home, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--home", str(store.root), "report", "--out", "./-"]) == 0
    out, _ = capfd.readouterr()
    assert not out.startswith("<!DOCTYPE html>") and (tmp_path / "-").read_text().startswith("<!DOCTYPE html>")


def test_verify_reports_and_repair_removes_orphan_temp_files(store: Home) -> None:
    old = time.time() - 3600
    orphans = [store.root / ".tmp-0123-catalog.duckdb", store.routes / ".tmp-abc-routes.parquet.partial"]
    for path in orphans:
        path.write_bytes(b"half written")
        os.utime(path, (old, old))
    fresh = store.routes / ".tmp-live-routes.parquet.partial"  # a writer still at work
    fresh.write_bytes(b"")
    report = api.store_verify(store.root)
    assert sum("temp file" in p for p in report["problems"]) == 2
    repaired = api.store_verify(store.root, repair=True)
    assert repaired["problems"] == [] and sorted(repaired["repaired"][:2]) == sorted(f"removed {p}" for p in orphans)
    assert not any(p.exists() for p in orphans) and fresh.exists()
    fresh.unlink()


def test_verify_finds_a_catalog_that_is_not_a_database(store: Home) -> None:
    build_catalog(store)
    store.catalog.write_text("<!DOCTYPE html><html></html>")
    try:
        assert any("not a DuckDB database" in p for p in api.store_verify(store.root)["problems"])
    finally:
        build_catalog(store)
    assert api.store_verify(store.root)["problems"] == []


def mai(*args: str, pipe_to_head: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("mai")), *args]
    if pipe_to_head:
        shell = " ".join(f"'{a}'" for a in command) + " | head -1"
        return subprocess.run(["bash", "-o", "pipefail", "-c", shell], check=False, capture_output=True, text=True,
                              timeout=120)
    return subprocess.run(command, check=False, capture_output=True, text=True,
                              timeout=120)


def test_expected_failures_are_one_line_and_a_closed_pipe_is_quiet(store: Home, tmp_path: Path) -> None:
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"index": 1, "question": "q?", "answer": "yes", "prediction": "yes"}\n')
    full = mai("score", "demo", "--predictions", str(predictions), "--per-line", "/dev/full")
    assert full.returncode == 1 and full.stderr.strip().splitlines() == [
        "error: No space left on device; free some space, then run the command again (what it stored is kept)"]
    missing = mai("--home", "/proc/mai-no-such-home", "catalog")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "Traceback" not in missing.stderr
    piped = mai("--home", str(store.root), "sql", "SELECT range FROM range(200000)", pipe_to_head=True)
    assert piped.stdout.strip() == "range" and piped.stderr == ""
