"""The `mai-run` flow's tasks around its shards: `materialize_samples` (storage/materialise.py does the work),
`limit_prompts` and, after the shards, `route_and_score` (mai/run/routes.py does its work; the run's end is
mai/run/finish.py). Each is the Prefect face of a step of the pipeline (mai/pipeline.py), so the flow's UI shows it."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS, DataSource
from mai.manifest import RunScores, StageMaps
from mai.pipeline import Materialised
from mai.plan import RunPlan
from mai.run.prompt_limits import checked_shards
from mai.run.routes import score_run
from mai.storage.materialise import materialise_samples
from mai.storage.paths import Home


@task(name="materialize-samples", cache_policy=NO_CACHE)
def materialize_samples(home: str, benchmark: str, source: DataSource, n_shards: int, limit: int | None,
                        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Materialised:
    """Returns the shard files, relative to the store root, and the source with the files its samples read."""
    return materialise_samples(Home.at(home), benchmark, source, n_shards, limit, max_image_pixels,
                               get_run_logger())


@task(name="limit-prompts", cache_policy=NO_CACHE)
def limit_prompts(plan: RunPlan, shard_paths: list[str]) -> list[str]:
    """The materialised shards with every sample whose prompt does not fit a model of the run made an error sample
    (mai/run/prompt_limits.py): what the run's shards then read. Its decisions are stored; a re-run reads them."""
    return checked_shards(plan, shard_paths, get_run_logger())


@task(name="route-and-score", cache_policy=NO_CACHE)
def route_and_score(plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]) -> RunScores:
    """Writes the run's route rows, scores and metrics; returns the summary the CLI prints."""
    return score_run(plan, shard_paths, stage_maps)
