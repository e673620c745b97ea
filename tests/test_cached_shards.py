"""A shard whose every step is stored is answered from the store by the parent, before any Prefect run is made for
it (mai/run/identities.py): a cached re-run makes no `mai-shard` flow run and no `step` task run, and gives the same
routes, metrics and counts as the run that computed them; a stage with nothing to compute loads no model; the run's
HTML report is built only when asked."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from mai.config import shapes_pair_config

LIMIT = 8
# the reasoning budget: the pair's (160) is not what these tests are about (which shards and steps run, and that stored
# steps compute nothing), and the small model's R outputs at 160 tokens were most of their generation time
SHORT_R = {"R": 24}


def _prefect_runs(flow_run_id: UUID) -> tuple[list[str], list[str]]:
    """The names of the task runs of a flow run, and of the `mai-shard` flow runs made under it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
    )

    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        shards = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["mai-shard"])),
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
    return sorted(t.name for t in tasks), sorted(f.name for f in shards)


def _run(home: Path, **overrides: Any) -> tuple[dict[str, Any], UUID]:
    from mai.flows.run import mai_run

    state = mai_run(shapes_pair_config(home=str(home), max_new_tokens=SHORT_R, **overrides), return_state=True)
    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None
    return state.result(), flow_run_id


def _same_results(first: dict[str, Any], again: dict[str, Any]) -> None:
    assert again["routes"] == first["routes"]
    assert again["metrics"] == first["metrics"]
    assert again["stages"] == first["stages"]
    assert again["shard_paths"] == first["shard_paths"]
    counts = {k: v for k, v in first["counts"].items() if k not in ("generations_computed", "generations_reused",
                                                                      "engine_generations")}
    assert {k: again["counts"][k] for k in counts} == counts
    assert again["counts"]["generations_computed"] == 0
    assert again["counts"]["generations_reused"] == first["counts"]["generations_needed"]


@pytest.mark.prefect
@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_a_cached_rerun_makes_no_shard_flow_and_only_the_shards_that_lack_outputs_run_as_shard_flows(
        home: Path, tmp_path: Path) -> None:
    """One store, five runs: the first computes 2 shards as shard flows; the same run again makes no shard flow or
    step task, gives the same run and builds no report; `mai run --report FILE` builds it; a wider run (4 shards,
    the first two stored) runs only the other two as shard flows; and the wider run again gives the same run."""
    from mai.backends.registry import clear_engines, loaded_engines
    from mai.cli import main
    from mai.flows.artifacts import report_hint
    from mai.storage.paths import Home

    first, first_id = _run(home, limit=LIMIT, shards=2)  # samples 0-7, in 2 shards of 4
    tasks, shards = _prefect_runs(first_id)
    assert len(shards) == 2 and any(name.startswith("materialize") for name in tasks)

    clear_engines()
    again, again_id = _run(home, limit=LIMIT, shards=2)
    tasks, shards = _prefect_runs(again_id)
    assert shards == []
    assert not [name for name in tasks if "/" in name or name.startswith(("step", "compact"))], tasks
    assert loaded_engines() == []  # nothing to compute: no engine made, no model loaded
    _same_results(first, again)
    # the run's own HTML report is not built by the run: on demand (`mai report RUN_ID`, or `mai run --report`,
    # written from the store after the run, computed or looked up alike: cli/runs.py)
    assert not list(Home.at(home).runs.glob("*/report.html"))
    out = tmp_path / "run-report.html"
    argv = ["--home", str(home), "run", "--benchmark", "shapes", "--small-model", "mai-shapes-small",
            "--large-model", "mai-shapes-large", "--limit", str(LIMIT), "--shards", "2",
            "--max-new-tokens", f"R={SHORT_R['R']}", "--report", str(out)]
    assert main(argv) == 0
    assert loaded_engines() == []  # the same run: a store lookup, nothing computed
    assert out.is_file() and out.stat().st_size > 100_000
    assert "mai report RUN1 --out" in report_hint("RUN1")

    wider, wider_id = _run(home, limit=2 * LIMIT, shards=4)  # shards of 4: the first two hold samples 0-7
    _, shards = _prefect_runs(wider_id)
    assert shards == [Path(p).stem for p in wider["shard_paths"][2:]], shards
    assert 0 < wider["counts"]["generations_computed"] < wider["counts"]["generations_needed"]
    again, _ = _run(home, limit=2 * LIMIT, shards=4)  # the shards answered from the store give the same run
    _same_results(wider, again)


# slow: it needs the session's shapes splits (200 MB, about 30 s of CPU to build), which the fast tier never builds
@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_a_stored_step_run_by_its_task_loads_no_model(home: Path) -> None:
    """The steps of a shard that runs as a flow (some other shard lacks outputs) still compute nothing and make no
    engine when their own outputs are stored, and end `Cached`: sparse RT's token selection included, which used to
    take the large model's engine before looking. The outputs are stored in this process (the in-process executor),
    and each step's task body is called here: no Prefect API is needed."""
    from prefect import State

    from mai import api, cascade
    from mai.backends.registry import clear_engines, loaded_engines
    from mai.run.jobs import StageJob
    from mai.run.plan import prepare_run
    from mai.storage.paths import Home
    from mai.tasks.step import step_state

    sparse: dict[str, Any] = {"limit": 4, "shards": 1, "mode": "full_rt", "transfer": "sparse", "transfer_layer": 1,
                              "max_new_tokens": SHORT_R}
    manifest = api.run(shapes_pair_config(home=str(home), **sparse), progress=False, local=True)
    plan = prepare_run(shapes_pair_config(home=str(home), **sparse), Home.at(home))
    clear_engines()
    (shard,) = manifest["shard_paths"]
    earlier: dict[str, dict[str, str]] = {}
    for group in cascade.stage_groups(plan.stages):
        for stage in group:
            job = StageJob(plan=plan, shard_path=shard, stage=stage, decoding=plan.decodings[stage.prompt_kind],
                           earlier=dict(earlier))
            state = step_state(job, logging.getLogger("mai"))
            assert isinstance(state, State) and state.name == "Cached", (stage.name, state)
            earlier[stage.name] = state.data
    assert earlier.get("select_rt")
    assert loaded_engines() == []
