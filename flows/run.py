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
from pathlib import Path
from typing import Any

from mai.flows.artifacts import publish_run
from mai.flows.assets import ensure_builtin_assets
from mai.flows.deployment import with_deployment_defaults
from mai.flows.fanout import run_shards
from mai.flows.plan import prepare_run
from mai.flows.prefect_sync import synchronous
from mai.flows.summary import build_manifest, summary_markdown, written_partitions
from mai.storage.catalog import build_catalog
from mai.storage.paths import Home
from mai.tasks.compact import compact_partitions
from mai.tasks.finalize import route_and_score, write_run_manifest
from mai.tasks.materialize import materialize_samples
from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact

from mai import progress, stop
from mai.config import RunConfig
from mai.progress import Tally


@flow(name="mai-run", persist_result=False)
def mai_run(config: RunConfig) -> dict[str, Any]:
    """Run one configuration; returns the run summary (routing counts, metrics, generations computed
    and reused, timings). Fails before any model loads if the configuration cannot run. SIGTERM (and so a
    Prefect cancellation) stops it within a decoding step, keeping what it stored (mai/stop.py)."""
    with stop.on_sigterm():
        return _run(config)


def _run(config: RunConfig) -> dict[str, Any]:
    started, started_at = time.perf_counter(), datetime.now(UTC)
    phases = Phases()
    config = with_deployment_defaults(config)
    home = Home.at(config.home)
    ensure_builtin_assets(config, home)
    plan = prepare_run(config, home)
    phases.end("plan_s")
    shard_paths = materialize_samples.with_options(result_storage=Path(home.prefect_results))(
        str(home.root), config.benchmark, plan.source, config.shards, config.limit, config.max_image_pixels
    )
    phases.end("materialize_s")
    outcomes = run_shards(plan, shard_paths, config.workers, _shard_progress(plan.run_id, len(shard_paths)))
    phases.end("shards_s")
    stage_maps = {shard: outcome["stage_maps"] for shard, outcome in outcomes.items()}
    tally = Tally()  # what this run's shards made the engines do (never another run's work)
    for outcome in outcomes.values():
        tally.add(Tally.from_dict(outcome["tally"]))
    outcome = route_and_score(plan.context, shard_paths, stage_maps)
    phases.end("route_and_score_s")
    manifest, row = build_manifest(plan, config, stage_maps, outcome, started, started_at, tally)
    manifest["timings"].update(phases.seconds, manifest_s=phases.since_last())
    write_run_manifest(plan.context, manifest, row)
    build_catalog(home)
    compact_partitions(str(home.root), sorted(str(d) for d in written_partitions(plan)))
    create_markdown_artifact(summary_markdown(manifest), key="mai-run-summary", description=f"run {plan.run_id}")
    publish_run(home, manifest)  # table artifacts of routes and metrics, the run's own HTML report
    return manifest


def _shard_progress(run_id: str, n_shards: int) -> Callable[[int], None]:
    """Shards done, in the Prefect UI (a progress artifact) and on the terminal (a `shards` bar: with workers,
    the stage bars of the shards are on the workers)."""
    artifact = synchronous(create_progress_artifact(progress=0.0, key="mai-run-progress",
                                                    description=f"shards done of run {run_id}"))
    progress.stage_started("shards", n_shards, run_id=run_id)

    def done(count: int) -> None:
        update_progress_artifact(artifact, 100.0 * count / n_shards)
        progress.advanced("shards", 1, run_id=run_id)

    return done


class Phases:
    """Where a run's wall time goes (plan, materialise, shards, routing and scoring, manifest)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def since_last(self) -> float:
        return time.perf_counter() - self._last

    def end(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._last = now - self._last, now
