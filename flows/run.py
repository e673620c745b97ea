"""`mai-run`: the MAI cascade (or a baseline) over a benchmark split, as a Prefect flow.

The run is the pipeline (mai/pipeline.py) on the Prefect executor: the plan (`prepare_run`) is made once and is the
single source of truth, and so is the resolution against the store (the command makes both and hands them over;
only a run started without them, from a deployment, makes them here); the shards whose outputs the store lacks run its ordered steps in `mai-shard` flows, in this
process or fanned out to GPU workers (`config.workers`, see flows/fanout.py). Each step computes only what the store
lacks, each identity once across every run on the store. The parent then routes, scores and writes the manifest,
once; the manifest is written last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.client.orchestration import get_client
from prefect.exceptions import TerminationSignal
from prefect.runtime import flow_run
from prefect.states import Cancelled

from mai import progress, stop
from mai.config import RunConfig
from mai.flows.artifacts import publish_run
from mai.flows.deployment import started_by, with_deployment_defaults
from mai.flows.fanout import check_workers, run_shards
from mai.flows.prefect_api import failing_fast_once_lost
from mai.manifest import RunManifest, RunScores, StageMaps
from mai.pipeline import HandedOver, Materialised, Phases, ShardsDone, complete, resolve, take_over
from mai.plan import RunPlan
from mai.run.assets import ensure_builtin_assets
from mai.run.plan import prepare_run
from mai.run.prefect_sync import synchronous
from mai.run.steps import StoreSteps
from mai.run.summary import describe_models
from mai.storage.paths import Home
from mai.tasks.materialize import limit_prompts, materialize_samples, route_and_score


@flow(name="mai-run", persist_result=False)
def mai_run(config: RunConfig, plan: RunPlan | None = None, resolved: HandedOver | None = None) -> RunManifest:
    """Run one configuration; returns the run's manifest (routing counts, metrics, generations computed and
    reused, timings). `plan`: the configuration already validated and resolved; `resolved`: the plan's shards
    already resolved against the store (`mai.api.run` makes both once, before Prefect starts). Without them (a
    deployment run, a notebook) the flow makes them, failing before any model loads if the configuration cannot
    run. SIGTERM (and so a Prefect cancellation) stops it within a decoding step, keeping what it stored
    (mai/stop.py)."""
    with stop.on_sigterm():
        try:
            with failing_fast_once_lost():
                return _run(config, plan, resolved)
        except (KeyboardInterrupt, stop.StopRequested, TerminationSignal):
            if not stop.stop_requested():
                raise
            # a stop the run handled (a fanned-out parent cancelled its drains): the flow run ends Cancelled, as they
            # do, not Crashed (Prefect's verdict on an exception that leaves a flow); Prefect ends a flow run in the
            # state its function returns, and its caller gets CancelledRun, which the command line reports in one line
            return cast(RunManifest, Cancelled(message=f"{stop.reason()}: what the run stored is kept"))


def _run(config: RunConfig, plan: RunPlan | None, resolved: HandedOver | None) -> RunManifest:
    phases = Phases()
    log = get_run_logger()
    if plan is None:
        config = with_deployment_defaults(config)
        home = Home.at(config.home)
        ensure_builtin_assets(config, home)
        plan = prepare_run(config, home)
        check_workers(config)
        plan = plan.model_copy(update={"command": started_by(plan.command)})
        phases.end("plan_s")
    name_flow_run(plan)
    log.info("run %s: %s of %s on %s, stages %s", plan.run_id, plan.config.mode, describe_models(plan), plan.benchmark,
             " -> ".join(stage.name for stage in plan.stages))
    steps = FlowSteps(log, publish_run)
    if resolved is None:
        resolution = resolve(plan, steps, phases)
    else:
        resolution = take_over(plan, resolved, steps)
        log.info("run %s: resolved by the command that started it: %d of %d shard(s) to compute", plan.run_id,
                 len(resolution.todo), len(resolution.shard_paths))
    return complete(resolution, steps, PrefectShards(), log)


class FlowSteps(StoreSteps):
    """The store's steps, the materialisation, prompt check and scoring as task runs of the flow (its UI)."""

    def materialise(self, plan: RunPlan) -> Materialised:
        return materialize_samples(plan.home, plan.benchmark, plan.source, plan.config.shards, plan.config.limit,
                                   plan.config.max_image_pixels)

    def check_prompts(self, plan: RunPlan, shard_paths: list[str]) -> list[str]:
        # a sample whose prompt does not fit a model of the run becomes an error sample here, before any model runs
        return limit_prompts(plan, shard_paths)

    def route_and_score(self, plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]
                        ) -> RunScores:
        return route_and_score(plan, shard_paths, stage_maps)


class PrefectShards:
    """The executor of a flow run: the shards that lack outputs run as `mai-shard` flows, in this process or fanned
    out to GPU workers (`config.workers`, flows/fanout.py)."""

    def compute(self, plan: RunPlan, todo: list[str], done_before: int, total: int) -> ShardsDone:
        if not todo:
            return ShardsDone({})
        get_run_logger().info("%d shard(s) %s", len(todo), f"fanned out to workers, {plan.config.workers} at a "
                              "time" if plan.config.workers else "in this process")
        return run_shards(plan, todo, plan.config.workers, _shard_progress(plan.run_id, total, done_before))


def name_flow_run(plan: RunPlan) -> None:
    """The flow run is named after the run (`mai-run/<--name or run id>`) and tagged with its benchmark, mode and
    models, so a person finds it in the UI without knowing its shards."""
    flow_run_id = flow_run.get_id()
    if flow_run_id is None:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run(UUID(flow_run_id), name=f"mai-run/{plan.run_name}",
                               tags=sorted({*flow_run.tags, *plan.tags}))


def _shard_progress(run_id: str, n_shards: int, done_before: int) -> Callable[[int], None]:
    """Shards done (`done_before` were answered from the store), in the Prefect UI (a progress artifact) and on the
    terminal (a `shards` bar: with workers, the stage bars of the shards are on the workers)."""
    artifact = synchronous(create_progress_artifact(progress=100.0 * done_before / n_shards, key="mai-run-progress",
                                                    description=f"shards done of run {run_id}"))
    progress.stage_started("shards", n_shards, run_id=run_id)
    progress.advanced("shards", done_before, run_id=run_id)

    def done(count: int) -> None:
        update_progress_artifact(artifact, 100.0 * (done_before + count) / n_shards)
        progress.advanced("shards", 1, run_id=run_id)

    return done

