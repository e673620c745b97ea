"""`mai-run`: the MAI cascade (or a baseline) over a benchmark split, as a Prefect flow.

The plan (`prepare_run`) is made once and is the single source of truth: its ordered steps run per shard in
`mai-shard` flows, in this process or fanned out to GPU workers (`config.workers`, see flows/fanout.py). Each
step computes only what the store lacks, each identity once across every run on the store. The parent then
routes, scores and writes the manifest, once; the manifest is written last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import cast

from mai.flows.assets import ensure_builtin_assets
from mai.flows.deployment import started_by, with_deployment_defaults
from mai.flows.fanout import ShardsDone, run_shards
from mai.flows.finish import finish_run
from mai.flows.plan import prepare_run
from mai.flows.prefect_sync import synchronous
from mai.flows.summary import describe_models
from mai.storage.paths import Home
from mai.tasks.from_store import shards_answered_by_store
from mai.tasks.logs import run_logger
from mai.tasks.materialize import limit_prompts, materialize_samples, route_and_score
from prefect import flow
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.exceptions import TerminationSignal

from mai import progress, stop
from mai.config import RunConfig
from mai.manifest import RunManifest
from mai.plan import RunPlan


@flow(name="mai-run", persist_result=False)
def mai_run(config: RunConfig, plan: RunPlan | None = None) -> RunManifest:
    """Run one configuration; returns the run's manifest (routing counts, metrics, generations computed and
    reused, timings). `plan`: the configuration already validated and resolved (`mai.flows.api.run` makes it once,
    before Prefect starts); without it (a deployment run, a notebook) the flow makes it, failing before any model
    loads if the configuration cannot run. SIGTERM (and so a Prefect cancellation) stops it within a decoding
    step, keeping what it stored (mai/stop.py)."""
    with stop.on_sigterm():
        try:
            return _run(config, plan)
        except (KeyboardInterrupt, stop.StopRequested, TerminationSignal):
            if not stop.stop_requested():
                raise
            # a stop the run handled (a fanned-out parent cancelled its drains): the flow run ends Cancelled, as they
            # do, not Crashed (Prefect's verdict on an exception that leaves a flow); Prefect ends a flow run in the
            # state its function returns, and its caller gets CancelledRun, which the command line reports in one line
            from prefect.states import Cancelled

            return cast(RunManifest, Cancelled(message=f"{stop.reason()}: what the run stored is kept"))


def _run(config: RunConfig, plan: RunPlan | None) -> RunManifest:
    started, started_at = time.perf_counter(), datetime.now(UTC)
    phases = Phases()
    log = run_logger()
    if plan is None:
        config = with_deployment_defaults(config)
        home = Home.at(config.home)
        ensure_builtin_assets(config, home)
        plan = prepare_run(config, home)
        plan = plan.model_copy(update={"command": started_by(plan.command)})
    name_flow_run(plan)
    log.info("run %s: %s of %s on %s, stages %s", plan.run_id, plan.mode, describe_models(plan), plan.benchmark,
             " -> ".join(stage.name for stage in plan.stages))
    phases.end("plan_s")
    shard_paths = materialize_samples(plan.home, plan.benchmark, plan.source, plan.config.shards, plan.config.limit,
                                      plan.config.max_image_pixels)
    # a sample whose prompt does not fit a model of the run becomes an error sample here, before any model runs
    shard_paths = limit_prompts(plan, shard_paths)
    phases.end("materialize_s")
    done = _run_shards(plan, shard_paths)
    phases.end("shards_s")
    scores = route_and_score(plan, shard_paths, {shard: o.stage_maps for shard, o in done.outcomes.items()})
    phases.end("route_and_score_s")
    return finish_run(plan, done.outcomes, scores, started, started_at, phases.seconds, done.hosts_taken_out)


def _run_shards(plan: RunPlan, shard_paths: list[str]) -> ShardsDone:
    """Every shard's outcome, in shard order. The shards whose every step is stored are answered from the store
    in one lookup per stage (tasks/from_store.py), without a `mai-shard` flow run or a task run: a cached shard
    costs a few milliseconds instead of ~0.3 s of Prefect round trips. Only the others run as shard flows."""
    log = run_logger()
    stored = shards_answered_by_store(plan, shard_paths)
    todo = [shard for shard in shard_paths if shard not in stored]
    if stored:
        log.info("%d of %d shard(s) answered from the store: every step's outputs are stored (by this or another "
                 "run), so they have no shard flow run or task runs", len(stored), len(shard_paths))
    outcomes, hosts_taken_out = dict(stored), {}
    if todo:
        log.info("%d shard(s) %s", len(todo), f"fanned out to workers, {plan.config.workers} at a time"
                 if plan.config.workers else "in this process")
        ran = run_shards(plan, todo, plan.config.workers,
                         _shard_progress(plan.run_id, len(shard_paths), done_before=len(stored)))
        outcomes |= ran.outcomes
        hosts_taken_out = ran.hosts_taken_out
    return ShardsDone({shard: outcomes[shard] for shard in shard_paths}, hosts_taken_out)


def name_flow_run(plan: RunPlan) -> None:
    """The flow run is named after the run (`mai-run/<--name or run id>`) and tagged with its benchmark, mode and
    models, so a person finds it in the UI without knowing its shards."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

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


class Phases:
    """Where a run's wall time goes (plan, materialise, shards, routing and scoring, manifest)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def end(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._last = now - self._last, now
