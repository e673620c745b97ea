"""A run whose every output is stored, on a Prefect server `mai` serves, is answered without Prefect's flow engine
(flows/stored_run.py) and recorded in the Prefect API over REST: the same run as the flow gives (routes, metrics,
stage statistics, counts), a Completed `mai-run/<name>` flow run with its logs and the flow's artifacts, and no
task run or shard flow run. A run that lacks an output goes through the flow."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from mai.config import shapes_pair_config

pytestmark = pytest.mark.prefect

LIMIT = 8


@pytest.fixture
def mai_serves_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """As `mai` started the API itself (flows/local_server.py): the test harness's server stands in for it."""
    from mai.flows import local_server
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url
    monkeypatch.setenv("PREFECT_API_URL", url)
    monkeypatch.setattr(local_server, "_provided", "local")


def _flow_runs(name: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))


def _recorded(flow_run_id: UUID) -> tuple[list[str], list[str], list[str]]:
    """The task runs, artifact keys and log lines of a flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [t.name for t in tasks], sorted(a.key or "" for a in artifacts), [log.message for log in logs]


@pytest.mark.usefixtures("mai_serves_the_api")
def test_a_stored_run_is_recorded_without_the_flow_engine_and_equals_the_flow_run(home: Path) -> None:
    from mai.flows import api
    from mai.storage.catalog import connect
    from mai.storage.paths import Home

    first = api.run(shapes_pair_config(home=str(home), limit=LIMIT, run_name="first"), progress=False)
    (flow_run,) = _flow_runs("mai-run/first")
    assert any(name.startswith("materialize") for name in _recorded(flow_run.id)[0])  # the flow ran

    again = api.run(shapes_pair_config(home=str(home), limit=LIMIT, run_name="again"), progress=False)
    for key in ("routes", "metrics", "stages", "shard_paths", "errors"):
        assert again[key] == first[key], key
    assert again["counts"] == {**first["counts"], "generations_computed": 0, "engine_generations": 0,
                               "generations_reused": first["counts"]["generations_needed"]}
    (recorded,) = _flow_runs("mai-run/again")
    assert recorded.state is not None and recorded.state.is_completed()
    assert f"mai-run:{again['run_id']}" in recorded.tags and {"mai", "benchmark:shapes"} <= set(recorded.tags)
    tasks, artifacts, logs = _recorded(recorded.id)
    assert tasks == []  # no task run, no shard flow run
    assert artifacts == ["mai-run-metrics", "mai-run-progress", "mai-run-report", "mai-run-routing",
                         "mai-run-summary"]
    assert any("answered from the store" in line for line in logs), logs
    with connect(Home.at(home)) as connection:  # the run is in the store as a completed run
        rows = connection.execute("SELECT count(*) FROM routes WHERE run_id = ?", [again["run_id"]]).fetchone()
        runs = connection.execute("SELECT run_name FROM runs WHERE run_id = ?", [again["run_id"]]).fetchall()
    assert rows == (LIMIT,) and runs == [("again",)]


@pytest.mark.usefixtures("mai_serves_the_api")
def test_a_run_lacking_an_output_goes_through_the_flow(home: Path) -> None:
    from mai.flows import api

    api.run(shapes_pair_config(home=str(home), limit=LIMIT // 2, run_name="half"), progress=False)
    more = api.run(shapes_pair_config(home=str(home), limit=LIMIT, run_name="more"), progress=False)
    assert more["counts"]["generations_computed"] > 0
    (flow_run,) = _flow_runs("mai-run/more")
    assert any(name.startswith("materialize") for name in _recorded(flow_run.id)[0])
