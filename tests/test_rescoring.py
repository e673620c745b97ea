"""Scoring without models: `mai score` over a JSONL of hub rows with predictions, `mai rescore` of a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mai.cli import main
from mai.storage.catalog import query
from mai.storage.paths import Home
from tests.helpers import run
from tests.hub_fixtures import fixture_dataset, write_fixture


def test_score_a_jsonl_of_hub_rows_with_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = fixture_dataset("pope").remove_columns(["image"]).to_list()  # images are optional here
    predictions = ["[[yes]]", "yes", "Yes.", "no", "[[No]]", "maybe"]
    lines = [json.dumps({**row, "prediction": p}) for row, p in zip(rows, predictions)]
    lines += ["{not json", json.dumps({**rows[0], "prediction": None})]
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    per_line = tmp_path / "scores.jsonl"
    assert main(["score", "pope", "--predictions", str(path), "--json", "--per-line", str(per_line)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["scored"] == 6 and [e["line"] for e in result["errors"]] == [7, 8]
    values = {(m["name"], m["subset"]): m["value"] for m in result["metrics"]}
    # answers: no, yes, no, yes, no, yes (fixture); "Yes." and "maybe" are not exact yes/no in lmms-eval
    assert values[("accuracy", "overall")] == pytest.approx(2 / 6)
    written = [json.loads(x) for x in per_line.read_text().splitlines()]
    assert len(written) == 8 and written[6]["error"] and written[1]["score"] == 1.0

    assert main(["score", "pope", "--predictions", str(path), "--profile", "official", "--json"]) == 0
    official = json.loads(capsys.readouterr().out)
    assert official["scorer_profile"] == "official"
    assert {(m["name"], m["subset"]): m["value"] for m in official["metrics"]}[("accuracy", "overall")] == 3 / 6
    assert main(["score", "pope", "--predictions", str(path), "--profile", "nope"]) == 2


def test_rescore_a_stored_run_under_another_profile(home: Path, tmp_path: Path) -> None:
    data = write_fixture("infovqa", tmp_path / "infovqa")
    manifest = run(home, benchmark="infovqa", data=str(data), limit=None)
    assert main(["--home", str(home), "rescore", manifest["run_id"], "--profile", "anls-paper"]) == 0
    _, rows = query(Home.at(home), f"SELECT DISTINCT scorer_profile FROM metrics WHERE run_id = '{manifest['run_id']}' "
                                   "ORDER BY 1")
    assert rows == [("anls-paper",), ("lmms-eval",)]
    _, rows = query(Home.at(home), "SELECT scorer_profile, count(*) FROM scores GROUP BY 1 ORDER BY 1")
    assert rows == [("anls-paper", 6), ("lmms-eval", 6)]
    # the lmms-eval profile re-computed from stored texts equals what the run stored
    _, same = query(Home.at(home), "SELECT count(*) FROM scores a JOIN scores b USING (run_id, sample_id) "
                                   "WHERE a.scorer_profile = 'lmms-eval' AND b.scorer_profile = 'anls-paper' "
                                   "AND b.score > a.score")
    assert same == [(0,)]  # the paper formula is never more generous than the scripts
    assert main(["--home", str(home), "rescore", "no-such-run", "--profile", "official"]) == 2
