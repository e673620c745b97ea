"""The `mai-run` flow's tasks around its shards: `materialize_samples` (benchmark rows -> sharded sample files,
images stored once by content), `limit_prompts` and, after the shards, `route_and_score` (tasks/routes.py does
its work; the run's end is flows/finish.py)."""

from __future__ import annotations

import itertools
import shutil
import uuid
from pathlib import Path

from mai.storage.paths import Home
from mai.storage.samples import (
    loader_tag,
    materialized_shards,
    shard_directory,
    shard_path,
    store_image,
    write_shard,
)
from mai.tasks.logs import run_logger
from mai.tasks.prompt_limits import checked_shards
from mai.tasks.routes import score_run
from prefect import task
from prefect.cache_policies import NO_CACHE

from mai.evals.base import Benchmark
from mai.evals.loading import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DataSource,
    assign_shards,
    check_columns,
    rows_to_samples,
)
from mai.evals.registry import get_benchmark
from mai.evals.spec import benchmark_rows
from mai.manifest import RunScores, StageMaps
from mai.plan import RunPlan


@task(name="materialize-samples", cache_policy=NO_CACHE)
def materialize_samples(home: str, benchmark: str, source: DataSource, n_shards: int, limit: int | None,
                        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> list[str]:
    """Returns the shard files, relative to the store root. A shard directory that exists is complete (it is
    renamed into place whole), and is reused as it is."""
    root = Home.at(home)
    bench = get_benchmark(benchmark)
    directory = shard_directory(root, bench.name, bench.version, source.fingerprint, n_shards, limit,
                                loader_tag(max_image_pixels))
    log = run_logger()
    if directory.is_dir():
        log.info("samples of %s (%s) already materialised in %s", bench.name, source.fingerprint, directory.name)
    else:
        _materialize(root, bench, source, n_shards, limit, max_image_pixels, directory)
    return materialized_shards(root, directory) or []


def _materialize(root: Home, bench: Benchmark, source: DataSource, n_shards: int, limit: int | None,
                 max_image_pixels: int, directory: Path) -> None:
    """The shards written into a temp directory beside `directory`, then renamed to it: a reader sees all of them
    or none. When another process renamed its copy first (the same rows), this one is dropped."""
    log = run_logger()
    columns, rows = benchmark_rows(bench, source)
    check_columns(bench, columns)
    limited = itertools.islice(rows, limit)
    samples = assign_shards(rows_to_samples(bench, limited, lambda b: store_image(root, b), max_image_pixels),
                            n_shards)
    partial = directory.with_name(f".tmp-{uuid.uuid4().hex}-{directory.name}")
    try:
        partial.mkdir(parents=True)
        count = max(s.shard for s in samples) + 1 if samples else 0
        for shard in range(count):  # each file records the count: a shard deleted later is found (storage/samples.py)
            write_shard(shard_path(partial, shard), [s for s in samples if s.shard == shard], source, count)
        try:
            partial.rename(directory)
        except OSError:
            if not directory.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    bad = [s for s in samples if s.error is not None]
    log.info("%d samples of %s materialised into %d shard(s), %d recorded as errors", len(samples), bench.name,
             n_shards, len(bad))
    for sample in bad[:20]:  # the run goes on without them; every one is in the routes table
        log.warning("sample %s cannot run: %s", sample.sample_id, sample.error)


@task(name="limit-prompts", cache_policy=NO_CACHE)
def limit_prompts(plan: RunPlan, shard_paths: list[str]) -> list[str]:
    """The materialised shards with every sample whose prompt does not fit a model of the run made an error sample
    (tasks/prompt_limits.py): what the run's shards then read. Its decisions are stored; a re-run reads them."""
    return checked_shards(plan, shard_paths, run_logger())


@task(name="route-and-score", cache_policy=NO_CACHE)
def route_and_score(plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]) -> RunScores:
    """Writes the run's route rows, scores and metrics; returns the summary the CLI prints."""
    return score_run(plan, shard_paths, stage_maps)
