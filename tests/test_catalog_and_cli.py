"""The DuckDB catalog and the CLI over real runs: views, saved queries, `mai sql`, `mai run`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from mai.cli import main
from mai.dashboards.saved import list_saved, load_saved
from mai.errors import ConfigError
from mai.storage.catalog import VIEW_NAMES, build_catalog, query
from mai.storage.paths import Home

RUN = ["run", "--local", "--limit", "12", "--max-new-tokens", "S=6", "--max-new-tokens", "R=12",
       "--max-new-tokens", "RT=6", "--max-new-tokens", "S2=6"]


def test_empty_store_has_typed_empty_views(tmp_path: Path) -> None:
    home = Home.at(tmp_path)
    for view in VIEW_NAMES:
        assert query(home, f"SELECT count(*) FROM {view}")[1] == [(0,)]
    assert query(home, "SELECT run_id, wall_s FROM runs")[0] == ["run_id", "wall_s"]


def test_cli_runs_and_saved_queries_answer_over_them(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), *RUN, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["--home", str(home), *RUN, "--s2", "--name", "with-s2"]) == 0
    assert "routing: MV1=" in capsys.readouterr().out

    assert main(["--home", str(home), "sql", "--saved", "routing_counts", "--format", "json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert len(counts) == 2 and all(c["mv1"] + c["mv2"] + c["rt"] == 12 for c in counts)
    assert counts[0]["mv1"] == first["routes"]["MV1"]

    assert main(["--home", str(home), "sql", "--saved", "s2_vs_non_s2", "--format", "json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)
    assert pair["run_without_s2"] == first["run_id"] and pair["common_samples"] == 12

    assert main(["--home", str(home), "sql", "--saved", "output_tokens", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("model,prompt_kind,generations,mean_output_tokens")
    assert {line.split(",")[1] for line in lines[1:]} == {"S", "R", "S2", "RT"}

    assert main(["--home", str(home), "sql", "SELECT count(*) AS n FROM generations WHERE text IS NOT NULL"]) == 0
    assert "(1 rows)" in capsys.readouterr().out

    # the catalog file is a plain DuckDB database with the same views
    catalog = build_catalog(Home.at(home))
    with duckdb.connect(str(catalog), read_only=True) as connection:
        assert connection.execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_saved_queries_are_listed_and_unknown_ones_fail_clearly() -> None:
    names = [name for name, _ in list_saved()]
    assert {"routing_counts", "s2_vs_non_s2", "output_tokens"} <= set(names)
    assert all(description for _, description in list_saved())
    with pytest.raises(ConfigError, match="no saved query"):
        load_saved("nope")
