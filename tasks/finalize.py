"""`route_and_score`: the decision per sample, its score, the run's metrics (tasks/routes.py does the work). The
manifest is the run's end (flows/finish.py)."""

from __future__ import annotations

from mai.tasks.routes import score_run
from prefect import task
from prefect.cache_policies import NO_CACHE

from mai.manifest import RunScores, StageMaps
from mai.plan import RunPlan


@task(name="route-and-score", cache_policy=NO_CACHE)
def route_and_score(plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]) -> RunScores:
    """Writes the run's route rows, scores and metrics; returns the summary the CLI prints."""
    return score_run(plan, shard_paths, stage_maps)
