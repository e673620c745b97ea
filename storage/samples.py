"""Materialised benchmark samples: one Parquet file per shard, images stored once by content hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import cast

import pyarrow.parquet as pq
from mai.storage.parquet import write_rows
from mai.storage.paths import Home
from mai.storage.rows import SampleRow

from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS, LOADER_VERSION, DataSource
from mai.files import write_atomically
from mai.types import Sample


def store_image(home: Home, encoded: bytes) -> tuple[str, str]:
    """Content-addressed: the same image bytes are stored once, whatever benchmark row they came from."""
    digest = hashlib.sha256(encoded).hexdigest()
    path = image_file(home.images, digest)
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
    None when there is none (its directory is renamed into place whole: one that exists is complete)."""
    if not directory.is_dir():
        return None
    return sorted(str(p.relative_to(home.root)) for p in directory.glob("shard-*.parquet"))


def shard_path(directory: Path, shard: int) -> Path:
    return directory / f"shard-{shard:05d}.parquet"


def write_shard(path: Path, samples: list[Sample], source: DataSource) -> Path:
    """The samples as a shard file, each row naming the data it was read from (`source`: its fingerprint, split and
    config)."""
    return write_rows(path, [_sample_row(s, source) for s in samples], "samples")


def image_file(images: Path, digest: str) -> Path:
    return images / digest[:2] / digest


def read_shard(path: Path, images: Path | None = None) -> list[Sample]:
    """The samples of a shard file. With `images` (the store's images folder as this host mounts it), each image
    path is its content-addressed file there, found by its hash: the file names the paths of the host that
    materialised it, which another host may mount elsewhere (docs/cluster.md)."""
    # the Parquet reader alone (`pq.read_table` goes through pyarrow.dataset, which imports pandas)
    rows: list[SampleRow] = pq.ParquetFile(path).read().to_pylist()  # a shard file has the samples table's columns
    samples = [_row_sample(row) for row in rows]
    return samples if images is None else [_with_images_in(sample, images) for sample in samples]


def _with_images_in(sample: Sample, images: Path) -> Sample:
    paths = tuple(str(image_file(images, digest)) for digest in sample.image_sha256)
    return sample if paths == sample.image_paths else replace(sample, image_paths=paths)


def sample_from_row(row: Mapping[str, object]) -> Sample:
    """A row of a shard file, or of the `samples` view (the samples table's columns), as a Sample."""
    return _row_sample(cast("SampleRow", row))


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


def _row_sample(row: SampleRow) -> Sample:
    return Sample(
        sample_id=row["sample_id"], benchmark=row["benchmark"], question=row["question"],
        options=tuple(row["options"]), answer=row["answer"], image_paths=tuple(row["image_paths"]),
        image_sha256=tuple(row["image_sha256"]), category=row["category"], content_hash=row["content_hash"],
        answer_style=row["answer_style"], shard=row["shard"], error=row["error"],
        references=tuple(row.get("references") or ()),
        meta=tuple(sorted(json.loads(row.get("meta_json") or "{}").items())),
    )
