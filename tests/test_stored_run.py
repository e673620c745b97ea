"""The store is the one cache. A run whose every output is stored is a store lookup (mai/pipeline.py): the same
run as the flow gives (routes, metrics, stage statistics, counts, the runs row), and no Prefect flow run. A run that
lacks an output goes through the `mai-run` flow, where a step whose outputs the store holds ends `Cached` and a step
whose output file was deleted from the store computes exactly what the file held, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pyarrow.parquet as pq
import pytest

from mai.config import shapes_pair_config

LIMIT = 8


def test_no_task_keeps_a_prefect_cache() -> None:
    """The store is the one cache: no task has a Prefect cache key (so none holds a host's store path) or a
    persisted result that could disagree with the store."""
    from prefect.cache_policies import NO_CACHE

    from mai.tasks.materialize import limit_prompts, materialize_samples, route_and_score
    from mai.tasks.step import run_step

    for task in (run_step, materialize_samples, limit_prompts, route_and_score):
        assert task.cache_policy is NO_CACHE and task.cache_key_fn is None, task.name
        assert not task.persist_result, task.name


def _flow_runs(name: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))


def _step_states(parent: UUID) -> dict[str, str]:
    """The `step` task runs made under a `mai-run` flow run (in its `mai-shard` subflows): label -> state name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        TaskRunFilter,
        TaskRunFilterName,
    )

    with get_client(sync_client=True) as client:
        shards = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent])))
        ids = [shard.id for shard in shards]
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": ids}),
                                      task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=" / ")))
    return {task.name: task.state_name or "" for task in tasks}


@pytest.mark.prefect
@pytest.mark.usefixtures("shapes_dataset")
def test_a_run_lacking_outputs_flows_a_stored_run_is_a_lookup_and_a_deleted_file_is_recomputed_alone(
        home: Path) -> None:
    """One store, three behaviours in turn (each needs the store the one before left): a run lacking outputs goes
    through the flow; the same run again is a store lookup equal to it; with one output file deleted, the run
    goes through the flow again, computes exactly what the file held, and every other step ends `Cached`."""
    from mai import api
    from mai.storage.catalog import connect
    from mai.storage.paths import Home

    # a run lacking an output goes through the flow: half the samples are stored (here, in this process), the whole
    # run computes the rest
    api.run(shapes_pair_config(home=str(home), limit=LIMIT // 2, run_name="half"), progress=False, local=True)
    first = api.run(shapes_pair_config(home=str(home), limit=LIMIT, run_name="first"), progress=False)
    assert first["counts"]["generations_computed"] > 0
    assert len(_flow_runs("mai-run/first")) == 1  # the flow ran

    # every output stored: the same run is a store lookup that equals the flow's run
    again = api.run(shapes_pair_config(home=str(home), limit=LIMIT, run_name="again"), progress=False)
    for key in ("routes", "metrics", "stages", "shard_paths", "errors"):
        assert again[key] == first[key], key
    assert again["counts"] == {**first["counts"], "generations_computed": 0, "engine_generations": 0,
                               "generations_reused": first["counts"]["generations_needed"]}
    assert _flow_runs("mai-run/again") == []  # a store lookup: no flow run
    with connect(Home.at(home)) as connection:  # the run is in the store as a completed run
        rows = connection.execute("SELECT count(*) FROM routes WHERE run_id = ?", [again["run_id"]]).fetchone()
        runs = connection.execute("SELECT run_name FROM runs WHERE run_id = ?", [again["run_id"]]).fetchall()
    assert rows == (LIMIT,) and runs == [("again",)]

    # a deleted output file is recomputed alone (one shard, so each step is one task run), the stored steps Cached
    (lost,) = sorted((home / "store" / "generations").glob("*large*/S/*.parquet"))[:1]
    lost_ids = set(pq.read_table(lost, columns=["gen_id"]).column("gen_id").to_pylist())
    lost.unlink()
    healed = api.run(shapes_pair_config(home=str(home), limit=LIMIT, shards=1, run_name="healed"), progress=False)
    assert healed["counts"]["generations_computed"] == len(lost_ids)
    assert healed["routes"] == first["routes"] and healed["metrics"] == first["metrics"]
    (flow_run,) = _flow_runs("mai-run/healed")
    states = _step_states(flow_run.id)
    assert {label: state for label, state in states.items() if label.endswith("s_large")} == {
        "shard-00000 / s_large": "Completed"}, states
    others = {state for label, state in states.items() if not label.endswith("s_large")}
    assert others == {"Cached"}, states  # every other step's outputs were stored: no model ran for them
