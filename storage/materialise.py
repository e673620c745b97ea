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
import json
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from mai.errors import ConfigError
from mai.evals.base import Benchmark
from mai.evals.files_read import FileRead, digest_now, files_digest, recording_reads, up_to
from mai.evals.fingerprint_cache import FingerprintCache
from mai.evals.loading import DataSource, assign_shards, check_columns, rows_to_samples
from mai.evals.registry import get_benchmark
from mai.evals.spec import benchmark_rows
from mai.pipeline import Log, Materialised
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
from mai.types import Sample

# how `flag_duplicate_ids` words an error that names every row of a shared id (it depends on the slice)
_SLICE_DEPENDENT_ERROR = "is shared by rows"
# a set's record of the files its rows read beyond the data (mai/evals/files_read.py): part of the set, renamed into
# place with its shards; a set that read such files has their digest in its name (`-r<digest>`)
FILES_READ = "files-read.json"
# (`data`: the rows' fingerprint and the benchmark's version, which may hold dashes: a spec's is `spec-<hash>`)
_SET_NAME = re.compile(r"(?P<data>.+-v.+)-(?P<subset>all|first\d+)-(?P<shards>\d+)shards(?P<loader>-l[^-]+(?:-px\d+)?)"
                       r"(?:-r(?P<reads>[0-9a-f]+))?")


def materialise_samples(home: Home, benchmark: str, source: DataSource, n_shards: int, limit: int | None,
                        max_image_pixels: int, log: Log) -> Materialised:
    """The shard files of the slice, relative to the store root, and the source with the digest of the files its
    rows read. A stored set is reused while every file it read still holds what it held (a directory that exists
    is complete: it is renamed into place whole); else the data is read again into a set of its own."""
    bench = get_benchmark(benchmark)
    directory = shard_directory(home, bench.name, bench.version, source.rows_fingerprint, n_shards, limit,
                                loader_tag(max_image_pixels))
    cache = FingerprintCache(home.fingerprints)
    for stored, files in _stored_sets(directory, source, limit, cache, same_slice=True):
        log.info("samples of %s (%s) already materialised in %s", bench.name, source.rows_fingerprint, stored.name)
        return Materialised(materialized_shards(home, stored) or [], replace(source, files_read=files_digest(files)))
    found = _from_stored_slice(home, directory, source, limit, cache)
    if found is None:
        samples, files = _read_data(home, bench, source, limit, max_image_pixels)
        bad = [s for s in samples if s.error is not None]
        log.info("%d samples of %s materialised into %d shard(s), %d recorded as errors, %d file(s) read beyond the "
                 "data", len(samples), bench.name, n_shards, len(bad), len(files))
        for sample in bad[:20]:  # the run goes on without them; every one is in the routes table
            log.warning("sample %s cannot run: %s", sample.sample_id, sample.error)
    else:
        samples, files = found
        log.info("%d samples of %s read from a larger slice the store holds", len(samples), bench.name)
    digest = files_digest(files)
    target = directory.with_name(directory.name + (f"-r{digest[:16]}" if digest else ""))
    full = replace(source, files_read=digest)
    _write_shards(target, assign_shards(samples, n_shards), full, files)
    return Materialised(materialized_shards(home, target) or [], full)


def _read_data(home: Home, bench: Benchmark, source: DataSource, limit: int | None, max_image_pixels: int
               ) -> tuple[list[Sample], tuple[FileRead, ...]]:
    """The first `limit` rows as samples, with every file they read beyond the data (recorded as they are read)."""
    with recording_reads(source.folder or Path.cwd()) as recorder:
        columns, rows = benchmark_rows(bench, source)
        check_columns(bench, columns)
        samples = rows_to_samples(bench, itertools.islice(rows, limit), lambda b: store_image(home, b),
                                  max_image_pixels)
    return samples, recorder.files()


def _stored_sets(directory: Path, source: DataSource, limit: int | None, cache: FingerprintCache,
                 same_slice: bool = False) -> Iterator[tuple[Path, tuple[FileRead, ...]]]:
    """The stored sets of the same data, conversion and loader rules that hold the first `limit` rows and whose
    files read by those rows still hold what they held, each with those files (`same_slice`: only the sets of this
    very slice and sharding). Each is checked when it is reached."""
    name = _SET_NAME.fullmatch(directory.name)
    if name is None or not directory.parent.is_dir():
        return
    for other in sorted(directory.parent.iterdir()):
        match = _SET_NAME.fullmatch(other.name)
        if (match is None or (match["data"], match["loader"]) != (name["data"], name["loader"])
                or not _holds(match["subset"], limit) or not other.is_dir()
                or same_slice and (match["subset"], match["shards"]) != (name["subset"], name["shards"])):
            continue
        files = _files_read(other, match["reads"])
        if files is None:
            continue
        relevant = up_to(files, limit)
        if not relevant or (source.folder is not None
                            and digest_now(source.folder, relevant, cache) == files_digest(relevant)):
            yield other, relevant


def _files_read(directory: Path, reads: str | None) -> tuple[FileRead, ...] | None:
    """The files a set read beyond its data (none for a set whose name has no digest); None when its record is
    missing or damaged (`mai store verify` names it): the set is not reused."""
    if reads is None:
        return ()
    try:
        raw = json.loads((directory / FILES_READ).read_text())
        files = tuple(FileRead(str(name), None if sha is None else str(sha), int(row)) for name, sha, row in raw["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return files if files_digest(files).startswith(reads) else None


def _from_stored_slice(home: Home, directory: Path, source: DataSource, limit: int | None,
                       cache: FingerprintCache) -> tuple[list[Sample], tuple[FileRead, ...]] | None:
    """The first `limit` samples (all with None) of a materialisation of the same data, conversion and loader
    rules that holds them and whose files still hold what they held, in data order, with the files those rows
    read; None when the store holds none."""
    for other, files in _stored_sets(directory, source, limit, cache):
        try:
            shards = materialized_shards(home, other) or []
            samples = [sample for shard in shards for sample in read_shard(home.root / shard)][:limit]
        except ConfigError:  # a damaged or incomplete shard set (`mai store verify`): read another, or the data
            continue
        if any(_SLICE_DEPENDENT_ERROR in (sample.error or "") for sample in samples):
            return None
        return samples, files
    return None


def _holds(subset: str, limit: int | None) -> bool:
    """Whether a materialised subset (`all`, `firstN`) holds the first `limit` rows (None: every row)."""
    return subset == "all" or (limit is not None and int(subset.removeprefix("first")) >= limit)


def _write_shards(directory: Path, samples: list[Sample], source: DataSource, files: tuple[FileRead, ...]) -> None:
    """The shards (and the record of the files read beyond the data, when any) written into a temp directory
    beside `directory`, then renamed to it: a reader sees all of them or none. When another process renamed its
    copy first (the same rows), this one is dropped."""
    partial = directory.with_name(f".tmp-{uuid.uuid4().hex}-{directory.name}")
    try:
        partial.mkdir(parents=True)
        count = max(s.shard for s in samples) + 1 if samples else 0
        for shard in range(count):  # each file records the count: a shard deleted later is found (storage/samples.py)
            write_shard(shard_path(partial, shard), [s for s in samples if s.shard == shard], source, count)
        if files:
            record = {"files": [[read.name, read.sha256, read.row] for read in files]}
            (partial / FILES_READ).write_text(json.dumps(record, separators=(",", ":")))
        try:
            partial.rename(directory)
        except OSError:
            if not directory.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
