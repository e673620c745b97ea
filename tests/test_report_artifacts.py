"""Prefect artifacts of a run (routing counts and metrics as tables, the command that builds its HTML report) and
of a regression check (the per-sample diff against its baseline), read back from the (test-harness) Prefect API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from mai.config import SHAPES_MAX_NEW_TOKENS, RunConfig, shapes_pair_config

pytestmark = pytest.mark.prefect

LIMIT = 8


def _artifact(flow_run_id: UUID, key: str) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    assert len(found) == 1, (key, found)
    data = found[0].data
    return json.loads(data) if found[0].type == "table" and isinstance(data, str) else data


@pytest.mark.usefixtures("shapes_dataset")
def test_run_and_regression_artifacts(home: Path) -> None:
    from mai.flows.regression import mai_regression
    from mai.flows.run import mai_run
    from mai.run.baseline import RegressionDetected
    from mai.storage.catalog import connect
    from mai.storage.paths import Home

    state = mai_run(shapes_pair_config(home=str(home), limit=LIMIT), return_state=True)
    manifest: dict[str, Any] = state.result()
    run_id = manifest["run_id"]
    flow_run = state.state_details.flow_run_id

    routing = _artifact(flow_run, "mai-run-routing")
    assert {r["route"]: r["samples"] for r in routing} == {k: v for k, v in manifest["routes"].items()
                                                          if v or k in ("MV1", "MV2", "RT")}
    assert sum(r["samples"] for r in routing) == LIMIT
    metrics = _artifact(flow_run, "mai-run-metrics")
    assert [(m["metric"], m["subset"], m["n"]) for m in metrics] == \
        [(m["metric"], m["subset"], m["n"]) for m in manifest["metrics"]]
    # the run's HTML report is built on demand (#33): the artifact gives the command, no file is written
    assert not (Home.at(home).runs / run_id / "report.html").exists()
    assert f"mai report {run_id} --out" in _artifact(flow_run, "mai-run-report")

    # the random-weight pair against the trained run: the diff lists exactly the samples whose score changed
    worse = RunConfig(home=str(home), benchmark="shapes", limit=LIMIT, max_new_tokens=SHAPES_MAX_NEW_TOKENS)
    regression = mai_regression(worse, baseline=run_id, return_state=True)
    with pytest.raises(RegressionDetected):
        regression.result()
    diff = _artifact(regression.state_details.flow_run_id, "mai-regression-diff")
    with connect(Home.at(home)) as connection:
        (candidate_run,), = connection.execute(
            "SELECT run_id FROM runs WHERE run_id <> ? ORDER BY started_at DESC LIMIT 1", [run_id]).fetchall()
        changed = connection.execute(
            "SELECT a.sample_id, a.score, b.score FROM scores a JOIN scores b USING (sample_id, scorer_profile) "
            "WHERE a.run_id = ? AND b.run_id = ? AND a.score <> b.score", [run_id, candidate_run]).fetchall()
    assert changed
    assert sorted((r["sample_id"], r["baseline"], r["candidate"]) for r in diff) == sorted(changed)
    assert all(r["change"] == ("worse" if r["candidate"] < r["baseline"] else "better") for r in diff)
