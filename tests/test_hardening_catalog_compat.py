"""The catalog file opens in the DuckDB versions users have: 1.4 LTS and 1.5 (the newest `duckdb-cli` on PyPI), not
only the 2.x this project writes it with. Each older release is a real wheel from PyPI, installed once into
build/duckdb-compat/<version> (`pip install --target`) and run in its own interpreter process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mai.storage.catalog import VIEW_NAMES, build_catalog
from mai.storage.paths import Home

ROOT = Path(__file__).resolve().parents[1]
OLDER = ["1.4.5", "1.5.6"]

READ = """
import sys, duckdb
with duckdb.connect(sys.argv[1], read_only=True) as connection:
    for view in sys.argv[2:]:
        print(view, connection.execute(f"SELECT count(*) FROM {view}").fetchone()[0])
print("version", duckdb.__version__)
"""


def older_duckdb(version: str) -> Path:
    target = ROOT / "build" / "duckdb-compat" / version
    if not (target / "duckdb").is_dir():
        installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                                    str(target), f"duckdb=={version}"], check=False, capture_output=True, text=True)
        assert installed.returncode == 0, installed.stderr[-2000:]
    return target


@pytest.mark.parametrize("version", OLDER)
def test_an_older_duckdb_opens_the_catalog(tmp_path: Path, version: str) -> None:
    home = Home.at(tmp_path / "home with 'quote'")
    catalog = build_catalog(home)
    result = subprocess.run([sys.executable, "-c", READ, str(catalog), *VIEW_NAMES], check=False,
                            capture_output=True, text=True, env={"PYTHONPATH": str(older_duckdb(version))})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == f"version {version}"
    assert lines[:-1] == [f"{view} 0" for view in VIEW_NAMES]
