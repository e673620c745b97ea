"""`route_and_score`: the decision per sample, its score, the run's metrics (tasks/routes.py does the work).
`write_run_manifest`: last."""

from __future__ import annotations

from mai.storage.paths import Home
from mai.storage.runs import write_manifest
from mai.storage.schemas import RunRow
from mai.tasks.routes import metric_rows_for, score_rows_for, score_run
from prefect import task
from prefect.cache_policies import NO_CACHE

from mai.manifest import RunManifest, RunScores, StageMaps
from mai.plan import RunPlan

__all__ = ["metric_rows_for", "route_and_score", "score_rows_for", "write_run_manifest"]


@task(name="route-and-score", cache_policy=NO_CACHE)
def route_and_score(plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]) -> RunScores:
    """Writes the run's route rows, scores and metrics; returns the summary the CLI prints."""
    return score_run(plan, shard_paths, stage_maps)


@task(name="write-run-manifest", cache_policy=NO_CACHE)
def write_run_manifest(plan: RunPlan, manifest: RunManifest, row: RunRow) -> str:
    return str(write_manifest(Home.at(plan.home), plan.run_id, manifest, row))
