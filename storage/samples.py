"""Materialised benchmark samples: one Parquet file per shard, images stored once by content hash."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import cast

from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS, LOADER_VERSION, DataSource
from mai.files import write_atomically
from mai.storage.damage import DamagedFileError, Unreadable
from mai.storage.image_assets import asset_path
from mai.storage.parquet import arrow_table, reading, write_table
from mai.storage.paths import Home
from mai.storage.rows import SampleRow
from mai.storage.tables import table_named
from mai.types import Sample


def store_image(home: Home, encoded: bytes) -> tuple[str, str]:
    """Content-addressed: the same image bytes are stored once, whatever benchmark row they came from."""
    digest = hashlib.sha256(encoded).hexdigest()
    path = asset_path(home.images, digest)
    if not path.exists():
        write_atomically(path, encoded)
    return str(path), digest


def shard_directory(home: Home, benchmark: str, version: str, fingerprint: str, n_shards: int, limit: int | None,
                    loader: str = "") -> Path:
    """One directory per (data, benchmark conversion version, subset, sharding, loader rules: `loader` names the
    loader's version and any non-default setting such as a pixel cap)."""
    subset = f"first{limit}" if limit else "all"
    return home.table_dir("samples") / benchmark / f"{fingerprint[:16]}-v{version}-{subset}-{n_shards}shards{loader}"


def loader_tag(max_image_pixels: int) -> str:
    """The loader's rules in a shard directory's name: its version, and the pixel cap where it is not the default."""
    cap = "" if max_image_pixels == DEFAULT_MAX_IMAGE_PIXELS else f"-px{max_image_pixels}"
    return f"-l{LOADER_VERSION}{cap}"


def materialized_shards(home: Home, directory: Path) -> list[str] | None:
    """The shard files of a materialisation, relative to the store root, as `materialize_samples` returns them;
    None when there is none (its directory is renamed into place whole: one that exists is complete). A shard file
    lost since (deleted) stops the run with one line naming it (a run over the others would report on part of its
    samples): `mai store verify --repair` moves the set aside, and the next run materialises it again."""
    if not directory.is_dir():
        return None
    missing = missing_shards(directory)
    if missing:
        raise DamagedFileError(Unreadable(directory / missing[0], "missing: a shard of a materialised set",
                                          "run `mai store verify --repair` (it moves the set aside), then run again: "
                                          "the set is materialised again"))
    return sorted(str(p.relative_to(home.root)) for p in directory.glob("shard-*.parquet"))


# the number of shard files of the set, in each shard file's Parquet metadata (sets written before it: gaps only)
SHARD_COUNT_KEY = b"mai.shard_count"


def missing_shards(directory: Path) -> list[str]:
    """The names of the shard files a materialised set should hold and does not: its shards are numbered from 0, and
    each records how many there are. Reads one footer (a damaged one is left to its reader)."""
    present = sorted(directory.glob("shard-*.parquet"))
    count = len(present)
    for path in present:
        with contextlib.suppress(DamagedFileError):
            with reading(path) as parquet:
                recorded = (parquet.schema_arrow.metadata or {}).get(SHARD_COUNT_KEY)
            count = int(recorded) if recorded else count
            break
    names = {p.name for p in present}
    last = max([count - 1, *(int(n[6:11]) for n in names if n[6:11].isdigit())])
    return [shard_path(directory, n).name for n in range(last + 1) if shard_path(directory, n).name not in names]


def shard_path(directory: Path, shard: int) -> Path:
    return directory / f"shard-{shard:05d}.parquet"


def write_shard(path: Path, samples: list[Sample], source: DataSource, shard_count: int | None = None) -> Path:
    """The samples as a shard file, each row naming the data it was read from (`source`: its fingerprint, split and
    config). `shard_count`: how many shard files the set holds, recorded in the file (`missing_shards`)."""
    table = arrow_table([_sample_row(s, source) for s in samples], table_named("samples").schema)
    if shard_count is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), SHARD_COUNT_KEY: str(shard_count)})
    return write_table(path, table)


def read_shard(path: Path, images: Path | None = None) -> list[Sample]:
    """The samples of a shard file. With `images` (the store's images folder as this host mounts it), each image
    path is its content-addressed file there, found by its hash: the file names the paths of the host that
    materialised it, which another host may mount elsewhere (docs/cluster.md)."""
    # the Parquet reader alone (`pq.read_table` goes through pyarrow.dataset, which imports pandas)
    with reading(path) as parquet:  # a missing or damaged shard: one line naming it (storage/damage.py)
        rows: list[SampleRow] = parquet.read().to_pylist()  # a shard file has the samples table's columns
    samples = [sample_from_row(row) for row in rows]
    return samples if images is None else [_with_images_in(sample, images) for sample in samples]


def _with_images_in(sample: Sample, images: Path) -> Sample:
    paths = tuple(str(asset_path(images, digest)) for digest in sample.image_sha256)
    return sample if paths == sample.image_paths else replace(sample, image_paths=paths)


def _sample_row(sample: Sample, source: DataSource) -> SampleRow:
    return {
        "sample_id": sample.sample_id, "benchmark": sample.benchmark, "dataset_fingerprint": source.fingerprint,
        "shard": sample.shard, "question": sample.question, "options": list(sample.options),
        "answer": sample.answer, "image_paths": list(sample.image_paths), "image_sha256": list(sample.image_sha256),
        "category": sample.category, "content_hash": sample.content_hash, "answer_style": sample.answer_style,
        "error": sample.error, "references": list(sample.references),
        "meta_json": json.dumps(dict(sample.meta), sort_keys=True), "split": source.split,
        "data_config": source.config,
    }


def sample_from_row(mapping: Mapping[str, object]) -> Sample:
    """A row of a shard file, or of the `samples` view (the samples table's columns), as a Sample."""
    row = cast("SampleRow", mapping)
    return Sample(
        sample_id=row["sample_id"], benchmark=row["benchmark"], question=row["question"],
        options=tuple(row["options"]), answer=row["answer"], image_paths=tuple(row["image_paths"]),
        image_sha256=tuple(row["image_sha256"]), category=row["category"], content_hash=row["content_hash"],
        answer_style=row["answer_style"], shard=row["shard"], error=row["error"],
        references=tuple(row.get("references") or ()),
        meta=tuple(sorted(json.loads(row.get("meta_json") or "{}").items())),
    )
