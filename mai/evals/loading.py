"""Benchmark rows -> samples. One code path for hub ids and local copies (Parquet files or a
`datasets.save_to_disk` directory), all through `datasets`, with images kept as encoded bytes."""

from __future__ import annotations

import glob
import hashlib
import io
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mai.errors import ConfigError
from mai.evals.base import BadRow, Benchmark, HubRow, RowFields, content_hash, row_id
from mai.evals.files_read import at_row
from mai.evals.fingerprint_cache import FingerprintCache, file_stats
from mai.types import Sample

# stores encoded image bytes once, by content; returns (path, sha256)
ImageSink = Callable[[bytes], tuple[str, str]]

# Qwen-VL's image processors refuse an image whose long side is over 200 times its short side (smart_resize's
# MAX_RATIO); such an image is a per-sample error here instead of a crash of the whole batch in the processor
MAX_ASPECT_RATIO = 200
# Images over this many pixels are refused from their header, before they are decoded: a 12000 x 12000 PNG of
# 17 KB (under PIL's bomb limit) costs 4.5 GB in the processor. 2**26 = 8192 x 8192; the processors resize every
# image to at most 4096 x 4096 pixels anyway. Configurable per run (`--max-image-pixels`).
DEFAULT_MAX_IMAGE_PIXELS = 2**26
# bump when the rows -> samples conversion changes which samples it makes (part of the shard directory's name, so
# a store materialises its data again under the new rules; the samples' content hashes change only where a
# sample's text did). 5: a set records the files its rows read beyond the data (mai/evals/files_read.py); a set of
# version 4 that read images by path has no such record, so it is never reused
LOADER_VERSION = "5"
# How long a row's prompt may be is decided in tokens, per model, before generation (mai/run/prompt_limits.py): a row
# whose prompt does not fit a model of the run is a per-sample error there. (Loader version 3 refused rows over
# 16 Ki characters instead, whatever the models.)
# The models' own control tokens, spelled out in a question: Qwen's ChatML `<|im_start|>`, `<|image_pad|>`,
# `<|vision_start|>` ... (any `<|name|>`) and InternVL's image markers. The tokenizers would read them as the real
# tokens: an `<|image_pad|>` asks for image features that do not exist (the processor crashed), an
# `<|im_end|><|im_start|>assistant` ends the user turn early (prompt injection).
_CONTROL_TOKEN = re.compile(r"<(\|[A-Za-z0-9_.\-]{1,64}\|>|/?(?:img|IMG_CONTEXT|quad|ref|box)>)")
_ZERO_WIDTH_SPACE = "\u200b"


@dataclass(frozen=True)
class DataSource:
    """Where a benchmark's rows come from. `fingerprint` identifies everything its samples read: the data's content
    (file hashes for a local copy, the pinned revision for the hub) with what selects rows from it (the split and
    the hub config: `rows_fingerprint`, known when the run is planned), and every file the rows made the loader read
    beyond the data (images named by path: `files_read`, their digest, known once the samples are materialised;
    mai/evals/files_read.py). It keys every join of a run to its samples, so two splits of one folder are two
    datasets, and so is a folder whose image was replaced."""

    location: str
    split: str
    config: str | None
    revision: str | None
    rows_fingerprint: str
    files_read: str = ""  # files_read.files_digest of the files the samples read; "" for none (or not yet known)

    @property
    def fingerprint(self) -> str:
        if not self.files_read:
            return self.rows_fingerprint  # a set that read nothing beyond its data: the data's identity
        selection = json.dumps({"rows": self.rows_fingerprint, "files_read": self.files_read}, sort_keys=True)
        return hashlib.sha256(selection.encode()).hexdigest()

    @property
    def folder(self) -> Path | None:
        """The folder the paths in the rows are relative to (a data file's folder, or the data directory); None
        for a hub dataset."""
        path = Path(self.location)
        if not path.exists():
            return None
        return path.parent if path.is_file() else path


def resolve_source(location: str, split: str, config: str | None, revision: str | None,
                   cache: FingerprintCache | None = None, default_split: str | None = None) -> DataSource:
    """Check that the data exists before anything loads; fingerprint local copies by content (an unchanged copy's
    fingerprint read from `cache`, when given, instead of hashing every file again). Local data that names no
    splits is one split, named `default_split` (the benchmark's): another split is refused (None: not checked)."""
    path = Path(location).expanduser()
    if path.exists():
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        if cache is not None:  # the cache's own file is no data (it is there when --data names the store's folder)
            own = cache.path.resolve()
            files = [f for f in files if f.name != own.name or f.resolve() != own]
        if not files:
            raise ConfigError(f"benchmark data directory '{path}' is empty")
        _check_split(path, split, default_split)
        named = [(str(file.relative_to(path) if path.is_dir() else file.name), file) for file in files]
        content = _local_fingerprint(path, named, cache)
        return DataSource(str(path.resolve()), split, config, revision, data_fingerprint(content, split, config))
    if location.startswith((".", "/", "~")) or location.count("/") != 1:
        raise ConfigError(
            f"benchmark data '{location}' is neither an existing local path nor a hub id of the form "
            "'owner/name': pass a Parquet file, a directory of Parquet files or a save_to_disk directory"
        )
    if not revision:
        raise ConfigError(f"hub dataset '{location}' needs a pinned revision (--revision COMMIT_SHA)")
    return DataSource(location, split, config, revision, data_fingerprint(f"{location}@{revision}", split, config))


def data_fingerprint(content: str, split: str, config: str | None) -> str:
    """The identity of the rows a run reads: `content` names the data (a local copy's file hashes, or a hub
    dataset's `location@revision`), `split` and `config` select rows from it. Before 2026-11-28 the fingerprint was
    `content` alone, so two splits of one folder shared their materialised samples (`mai store verify` flags the
    runs that read another split's samples that way)."""
    selection = json.dumps({"content": content, "split": split, "config": config}, sort_keys=True)
    return hashlib.sha256(selection.encode()).hexdigest()


def _local_fingerprint(path: Path, named: list[tuple[str, Path]], cache: FingerprintCache | None) -> str:
    """SHA-256 over each file's name and the SHA-256 of its content, in order; from `cache` when every file has the
    size and times it had when that fingerprint was hashed."""
    listed_at = time.time_ns()  # before the stats: a write after this instant is never trusted as unchanged
    listing = file_stats(named) if cache is not None else ()
    location = str(path.resolve())
    if cache is not None and (known := cache.lookup(location, listing)) is not None:
        return known
    digest = hashlib.sha256()
    for name, file in named:
        digest.update(name.encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    fingerprint = digest.hexdigest()
    if cache is not None:
        cache.store(location, listing, fingerprint, listed_at)
    return fingerprint


# the hub's Parquet layout names a split's files `<split>-00000-of-00003.parquet` (some exports add `-<hash>`)
_SPLIT_FILE = re.compile(r"^(.+?)-\d+-of-\d+(?:-[0-9a-f]+)?\.parquet$")


def local_splits(path: Path) -> list[str] | None:
    """The splits a local copy names: a `save_to_disk` DatasetDict's, or the hub layout's file names and split
    directories; None when nothing in it names a split (every Parquet file is then the split asked for)."""
    listing = path / "dataset_dict.json"
    if listing.exists():
        try:
            return sorted(json.loads(listing.read_text())["splits"])
        except (ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"'{listing}' is not a datasets DatasetDict listing: {error}") from error
    if (path / "state.json").exists():
        return None  # one saved Dataset: no splits
    files = [f for f in path.rglob("*.parquet") if not f.name.startswith(".")]
    named = {m.group(1) for f in files if (m := _SPLIT_FILE.match(f.name))}
    return sorted(named) or None


def _check_split(path: Path, split: str, default_split: str | None) -> None:
    splits = local_splits(path) if path.is_dir() else None
    files = [f for f in path.rglob("*.parquet") if not f.name.startswith(".")] if path.is_dir() else []
    if any(f.parent.name == split for f in files) or (splits is not None and split in splits):
        return
    if splits is not None:
        raise ConfigError(f"benchmark data '{path}' has no split '{split}': it has {splits} (--split)")
    if default_split is not None and split != default_split:
        raise ConfigError(f"benchmark data '{path}' names no splits: it is one split, read as '{default_split}'; "
                          f"leave --split out (a split '{split}' would store the same rows under a second name)")


def split_files(files: list[Path], split: str) -> list[Path]:
    """The Parquet files of `split`: the hub layout's `<split>-00000-of-00003.parquet` of exactly that split (`test`
    never matches `test-hard-...`), and the files in a directory named after it."""
    return [f for f in files if f.parent.name == split or ((m := _SPLIT_FILE.match(f.name)) and m.group(1) == split)]


def load_dataset_rows(source: DataSource, image_columns: tuple[str, ...]) -> tuple[list[str], Iterator[HubRow]]:
    """The column names and the rows of the split, images left undecoded ({"bytes", "path"})."""
    import datasets

    dataset = _open(source)
    for column in image_columns:
        if column in dataset.column_names and isinstance(dataset.features[column], datasets.Image):
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
    return list(dataset.column_names), _decoded_rows(dataset)


# rows read at once; a batch holding a row that cannot be decoded is read again row by row
_BATCH = 256


class UndecodableRow(dict[str, object]):
    """A row whose text cells in `columns` are not valid UTF-8 (a Parquet string column can hold any bytes; pyarrow
    refuses them when it converts the row), with the cells that could be read. It becomes a recorded per-sample
    error, and the rows around it are read as usual."""

    def __init__(self, cells: dict[str, object], columns: tuple[str, ...]) -> None:
        super().__init__(cells)
        self.columns = columns


def _decoded_rows(dataset: Any) -> Iterator[HubRow]:
    """The rows of a `datasets.Dataset` (untyped: Any), in order, each as `iter(dataset)` gives it."""
    for start in range(0, len(dataset), _BATCH):
        stop = min(start + _BATCH, len(dataset))
        try:
            batch: dict[str, list[object]] = dataset[start:stop]
        except (UnicodeDecodeError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            yield from (_one_row(dataset, index) for index in range(start, stop))
            continue
        yield from (dict(zip(batch, cells, strict=True)) for cells in zip(*batch.values(), strict=True))


def _one_row(dataset: Any, index: int) -> HubRow:
    with suppress(UnicodeDecodeError, ValueError):
        row: dict[str, object] = dataset[index]
        return row
    cells: dict[str, object] = {}
    failed = []
    for column in dataset.column_names:
        try:
            cells[column] = dataset.select_columns([column])[index][column]
        except (UnicodeDecodeError, ValueError):
            failed.append(column)
    return UndecodableRow(cells, tuple(failed))


def _open(source: DataSource) -> Any:
    """The split as a `datasets.Dataset` (an untyped library: Any)."""
    import datasets

    path = Path(source.location)
    if not path.exists():
        return datasets.load_dataset(source.location, source.config, split=source.split, revision=source.revision)
    if path.is_dir() and any((path / name).exists() for name in ("state.json", "dataset_dict.json")):
        loaded = datasets.load_from_disk(str(path))
        return loaded[source.split] if isinstance(loaded, datasets.DatasetDict) else loaded
    # dot files are never data: a half-written temp file (`.tmp-...parquet`) left by a killed writer is skipped
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*.parquet") if not f.name.startswith("."))
    in_split = split_files(files, source.split)
    # `datasets` reads each data file as a glob pattern: escaped, a path under `a[1]` (or `x*`) names only itself
    return datasets.load_dataset("parquet", data_files=[glob.escape(str(f)) for f in (in_split or files)],
                                 split="train")


def check_columns(benchmark: Benchmark, columns: list[str]) -> None:
    missing = [c for c in benchmark.required_columns if c not in columns]
    if missing:
        raise ConfigError(
            f"benchmark '{benchmark.name}' data lacks column(s) {missing}; it has {columns}. "
            "Point --data at a copy with the hub's column schema."
        )


def rows_to_samples(benchmark: Benchmark, rows: Iterable[HubRow], store_image: ImageSink,
                    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> list[Sample]:
    """Every row becomes a sample; a row that cannot be used becomes a sample with `error` set. Rows that share a
    sample id are errors too (`flag_duplicate_ids`): one id never silently stands for two rows."""
    samples = []
    for index, row in enumerate(rows):
        at_row(index)  # what the row reads by path is recorded against it (mai/evals/files_read.py)
        samples.append(_row_to_sample(benchmark, row, index, store_image, max_image_pixels))
    return flag_duplicate_ids(samples)


def _row_to_sample(benchmark: Benchmark, row: HubRow, index: int, store_image: ImageSink,
                   max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Sample:
    fallback_id = row_id(benchmark.name, benchmark.id_column, row, index)
    if isinstance(row, UndecodableRow):
        columns = ", ".join(f"'{c}'" for c in row.columns)
        return _error_sample(benchmark.name, fallback_id, f"column(s) {columns} hold text that is not valid UTF-8")
    try:
        fields = _neutralised(benchmark.parse_row(row, index))
        for encoded in fields.images:
            _check_image(encoded, max_image_pixels)
        stored = [store_image(encoded) for encoded in fields.images]
    except BadRow as error:
        return _error_sample(benchmark.name, fallback_id, str(error))
    paths, hashes = tuple(p for p, _ in stored), tuple(h for _, h in stored)
    sample = Sample(
        sample_id=fields.sample_id, benchmark=benchmark.name, question=fields.question, options=fields.options,
        answer=fields.answer, image_paths=paths, image_sha256=hashes, category=fields.category,
        content_hash=content_hash(fields.question, fields.options, hashes, fields.meta), answer_style="phrase",
        references=fields.references or (fields.answer,), meta=fields.meta,
    )
    return replace(sample, answer_style=benchmark.answer_style(sample))


def neutralise_control_tokens(text: str) -> str:
    """A model control token spelled out in benchmark text (`<|image_pad|>`, `<|im_end|>` ...) made plain text: a
    zero-width space after its `<` means no tokenizer matches it as the special token, while the text reads the
    same. Neutralised rather than refused: a question may legitimately quote such a string (a question about chat
    templates), and the sample stays answerable; the stored question is the neutralised one, so its content hash
    (and every identity) says what the model saw. Text without such tokens is unchanged."""
    return _CONTROL_TOKEN.sub(lambda match: "<" + _ZERO_WIDTH_SPACE + match.group(1), text)


def _neutralised(fields: RowFields) -> RowFields:
    """Everything of a row that reaches a prompt: the question, the options and the fields a benchmark puts into
    its question (hints, ...); reference answers never reach a model."""
    clean = neutralise_control_tokens
    return replace(fields, question=clean(fields.question), options=tuple(clean(o) for o in fields.options),
                   meta=tuple((key, clean(value)) for key, value in fields.meta))


def flag_duplicate_ids(samples: list[Sample]) -> list[Sample]:
    """Rows that share a sample id. Exact duplicates (same id and the same content, reference answers included)
    count once: the first is kept and each later copy becomes an error sample, so it is reported, never scored
    twice. Rows with one id and different content are all errors (which one is meant cannot be known; merging them
    would give the second the first's generations and score). A row that is an error already (a malformed line,
    whose id is its position) keeps its own reason and yields the id to the usable rows: it never takes a valid row
    down with it. A later row's id becomes `<id>#row<N>` (N its 0-based row) so that every row keeps a row of its
    own in the samples and routes."""
    rows: dict[str, list[int]] = {}
    for index, sample in enumerate(samples):
        rows.setdefault(sample.sample_id, []).append(index)
    out = list(samples)
    for sample_id, indices in rows.items():
        if len(indices) == 1:
            continue
        usable = [i for i in indices if samples[i].error is None]
        keeper = (usable or indices)[0]  # the row that keeps the plain id
        for index in indices:
            if samples[index].error is not None and index != keeper:
                out[index] = replace(samples[index], sample_id=f"{sample_id}#row{index}")
        if len(usable) < 2:
            continue
        exact = len({(s.content_hash, s.answer, s.references, s.category, s.error, s.question)
                     for s in (samples[i] for i in usable)}) == 1
        for position, index in enumerate(usable):
            if exact and position == 0:
                continue
            unique_id = sample_id if index == keeper else f"{sample_id}#row{index}"
            reason = (f"exact duplicate of row {usable[0]} (sample id '{sample_id}'): counted once" if exact else
                      f"sample id '{sample_id}' is shared by rows {usable} with different content: none is used")
            out[index] = _error_sample(samples[index].benchmark, unique_id, reason)
    return out


def _error_sample(benchmark: str, sample_id: str, reason: str) -> Sample:
    return Sample(sample_id=sample_id, benchmark=benchmark, question="", options=(), answer="", image_paths=(),
                  image_sha256=(), category="", content_hash="", answer_style="phrase", error=reason)


def _check_image(encoded: bytes, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> None:
    """Size from the header first (an image too large, or too elongated for the processor, is refused before it is
    decoded), then decode fully now, so a corrupt image is a recorded per-sample error instead of a crash
    mid-batch."""
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():  # PIL warns of a possible bomb from 89 M pixels: the cap decides here
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(encoded))
        with image:
            _check_size(*image.size, max_pixels=max_pixels)
            image.load()
    except BadRow:
        raise
    except Exception as error:  # PIL raises many types for bad data
        # without the in-memory file's repr (`<_io.BytesIO object at 0x7f...>`): a reason reads the same in every run
        reason = re.sub(r"\s*<[^<>]* at 0x[0-9a-fA-F]+>", "", str(error))
        raise BadRow(f"image cannot be decoded: {type(error).__name__}: {reason}") from error


def _check_size(width: int, height: int, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise BadRow(f"image is {width} x {height} pixels: empty")
    if width * height > max_pixels:
        raise BadRow(f"image is {width} x {height} = {width * height} pixels, over the limit of {max_pixels} "
                     "(raise it with --max-image-pixels)")
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise BadRow(f"image is {width} x {height} pixels: an aspect ratio over {MAX_ASPECT_RATIO}, which the "
                     "model's image processor refuses")


def assign_shards(samples: list[Sample], n_shards: int) -> list[Sample]:
    """Contiguous shards of near-equal size, stable for a given data order and shard count."""
    size = max(1, -(-len(samples) // max(1, n_shards)))
    return [replace(sample, shard=index // size) for index, sample in enumerate(samples)]
