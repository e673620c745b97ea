"""Benchmark rows -> sharded sample files in the store, images stored once by content (no Prefect: the `mai-run`
flow calls it through its `materialize-samples` task, a run with nothing to compute directly).

A slice is a prefix of the data's rows in the data's order (`--limit N`: the first N), and shards are contiguous
runs of that order (mai/evals/loading.py `assign_shards`). So a slice of data the store materialised before, in a
larger slice or another sharding, is read from the store: the same samples, without reading the data (or importing
`datasets`). The one exception is a row whose id another row shares with different content: that error names every
row of the id, so it depends on the slice, and such a slice is read from the data again.
"""

from __future__ import annotations

import itertools
import re
import shutil
import uuid
from pathlib import Path

from mai.storage.paths import Home
from mai.storage.samples import (
    loader_tag,
    materialized_shards,
    read_shard,
    shard_directory,
    shard_path,
    store_image,
    write_shard,
)

from mai.errors import ConfigError
from mai.evals.base import Benchmark
from mai.evals.loading import DataSource, assign_shards, check_columns, rows_to_samples
from mai.evals.registry import get_benchmark
from mai.evals.spec import benchmark_rows
from mai.pipeline import Log
from mai.types import Sample

# how `flag_duplicate_ids` words an error that names every row of a shared id (it depends on the slice)
_SLICE_DEPENDENT_ERROR = "is shared by rows"


def materialise_samples(home: Home, benchmark: str, source: DataSource, n_shards: int, limit: int | None,
                        max_image_pixels: int, log: Log) -> list[str]:
    """The shard files of the slice, relative to the store root. A shard directory that exists is complete (it is
    renamed into place whole), and is reused as it is."""
    bench = get_benchmark(benchmark)
    directory = shard_directory(home, bench.name, bench.version, source.fingerprint, n_shards, limit,
                                loader_tag(max_image_pixels))
    if directory.is_dir():
        log.info("samples of %s (%s) already materialised in %s", bench.name, source.fingerprint, directory.name)
        return materialized_shards(home, directory) or []
    samples = _from_stored_slice(home, directory, limit)
    if samples is None:
        samples = _read_data(home, bench, source, limit, max_image_pixels)
        bad = [s for s in samples if s.error is not None]
        log.info("%d samples of %s materialised into %d shard(s), %d recorded as errors", len(samples), bench.name,
                 n_shards, len(bad))
        for sample in bad[:20]:  # the run goes on without them; every one is in the routes table
            log.warning("sample %s cannot run: %s", sample.sample_id, sample.error)
    else:
        log.info("%d samples of %s read from a larger slice the store holds", len(samples), bench.name)
    _write_shards(directory, assign_shards(samples, n_shards), source)
    return materialized_shards(home, directory) or []


def _read_data(home: Home, bench: Benchmark, source: DataSource, limit: int | None, max_image_pixels: int
               ) -> list[Sample]:
    columns, rows = benchmark_rows(bench, source)
    check_columns(bench, columns)
    return rows_to_samples(bench, itertools.islice(rows, limit), lambda b: store_image(home, b), max_image_pixels)


def _from_stored_slice(home: Home, directory: Path, limit: int | None) -> list[Sample] | None:
    """The first `limit` samples (all with None) of a materialisation of the same data, conversion and loader
    rules that holds them, in data order; None when the store holds none."""
    name = re.fullmatch(r"(?P<data>.+-v[^-]+)-(?P<subset>all|first\d+)-\d+shards(?P<loader>.*)", directory.name)
    if name is None or not directory.parent.is_dir():
        return None
    for other in sorted(directory.parent.iterdir()):
        found = re.fullmatch(r"(?P<data>.+-v[^-]+)-(?P<subset>all|first\d+)-\d+shards(?P<loader>.*)", other.name)
        if (found is None or (found["data"], found["loader"]) != (name["data"], name["loader"])
                or not _holds(found["subset"], limit)):
            continue
        try:
            shards = materialized_shards(home, other) or []
            samples = [sample for shard in shards for sample in read_shard(home.root / shard)][:limit]
        except ConfigError:  # a damaged or incomplete shard set (`mai store verify`): read another, or the data
            continue
        if any(_SLICE_DEPENDENT_ERROR in (sample.error or "") for sample in samples):
            return None
        return samples
    return None


def _holds(subset: str, limit: int | None) -> bool:
    """Whether a materialised subset (`all`, `firstN`) holds the first `limit` rows (None: every row)."""
    if subset == "all":
        return True
    return limit is not None and int(subset.removeprefix("first")) >= limit


def _write_shards(directory: Path, samples: list[Sample], source: DataSource) -> None:
    """The shards written into a temp directory beside `directory`, then renamed to it: a reader sees all of them
    or none. When another process renamed its copy first (the same rows), this one is dropped."""
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
