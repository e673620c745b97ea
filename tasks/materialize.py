"""`materialize_samples`: benchmark rows -> sharded sample files (images stored once by content)."""

from __future__ import annotations

import itertools
from typing import Any

from mai.storage.paths import Home
from mai.storage.samples import loader_tag, shard_directory, shard_path, store_image, write_shard
from mai.tasks.logs import run_logger
from mai.tasks.prompt_limits import checked_shards
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from mai.evals.loading import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DataSource,
    assign_shards,
    check_columns,
    rows_to_samples,
)
from mai.evals.registry import get_benchmark
from mai.evals.spec import benchmark_rows
from mai.identity import canonical_hash
from mai.plan import RunPlan


def _cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    source: DataSource = parameters["source"]
    benchmark = get_benchmark(parameters["benchmark"])
    return "materialize-" + canonical_hash([parameters["home"], benchmark.name, benchmark.version,
                                            source.fingerprint, parameters["n_shards"], parameters["limit"],
                                            loader_tag(parameters.get("max_image_pixels", DEFAULT_MAX_IMAGE_PIXELS))])


@task(name="materialize-samples", cache_key_fn=_cache_key, result_serializer="json", persist_result=True)
def materialize_samples(home: str, benchmark: str, source: DataSource, n_shards: int, limit: int | None,
                        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> list[str]:
    """Returns the shard files, relative to the store root. Existing shard files are reused as they are."""
    root = Home.at(home)
    bench = get_benchmark(benchmark)
    directory = shard_directory(root, bench.name, bench.version, source.fingerprint, n_shards, limit,
                                loader_tag(max_image_pixels))
    done = directory / "complete"
    log = run_logger()
    if done.exists():
        log.info("samples of %s (%s) already materialised in %s", bench.name, source.fingerprint, directory.name)
    else:
        columns, rows = benchmark_rows(bench, source)
        check_columns(bench, columns)
        limited = itertools.islice(rows, limit)
        samples = assign_shards(rows_to_samples(bench, limited, lambda b: store_image(root, b), max_image_pixels),
                                n_shards)
        for shard in range(max(s.shard for s in samples) + 1 if samples else 0):
            write_shard(shard_path(directory, shard), [s for s in samples if s.shard == shard], source.fingerprint)
        done.write_text(str(len(samples)))
        bad = [s for s in samples if s.error is not None]
        log.info("%d samples of %s materialised into %d shard(s), %d recorded as errors", len(samples), bench.name,
                 n_shards, len(bad))
        for sample in bad[:20]:  # the run goes on without them; every one is in the routes table
            log.warning("sample %s cannot run: %s", sample.sample_id, sample.error)
    return sorted(str(p.relative_to(root.root)) for p in directory.glob("shard-*.parquet"))


@task(name="limit-prompts", cache_policy=NO_CACHE)
def limit_prompts(plan: RunPlan, shard_paths: list[str]) -> list[str]:
    """The materialised shards with every sample whose prompt does not fit a model of the run made an error sample
    (tasks/prompt_limits.py): what the run's shards then read. Its decisions are stored; a re-run reads them."""
    return checked_shards(plan, shard_paths, run_logger())

