"""Reading a spec benchmark's data where `datasets` would not read it as the spec means it (mai/evals/spec.py):
VLMEvalKit's TSV and JSONL rows, and any format's column names from its header alone (checked before a run)."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from mai.errors import ConfigError
from mai.evals.base import HubRow
from mai.evals.loading import DataSource
from mai.evals.spec_paths import is_url

# VLMEvalKit stores a repeated image once: the other rows' `image` holds that row's `index` (a short string)
_IMAGE_REFERENCE_MAX = 64
# a row that could not be read at all (a malformed line): the reason, under a key no data column has
ROW_ERROR = "\x00mai-row-error"


def data_columns(data_format: str, source: DataSource) -> list[str] | None:
    """The data's column names, read from its header (TSV: the first line; JSONL: the first object; Parquet: the
    schema); None for a hub copy or a `save_to_disk` directory (read when the rows are)."""
    path = Path(source.location)
    if not path.exists():
        return None
    if data_format == "vlmevalkit-tsv":
        with path.open(encoding="utf-8", errors="replace") as handle:
            header = handle.readline().rstrip("\r\n")
        if not header.strip():
            raise ConfigError(f"benchmark data {path}: " + ("empty TSV file" if path.stat().st_size == 0 else
                              "the TSV's first line is blank") + " (it needs a header line: index, image, ...)")
        return header.split("\t")
    if data_format == "jsonl":
        with path.open("rb") as handle:
            for raw in handle:  # the first object: a line before it that is no object is a row error later
                try:
                    first = json.loads(raw) if raw.strip() else None
                except ValueError:
                    continue
                if isinstance(first, dict):
                    return list(first)
        raise ConfigError(f"benchmark data {path}: no line of this JSONL file holds a JSON object (one row per line)")
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*.parquet") if not f.name.startswith("."))
    if not files:
        return None
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(files[0]).names)
    except Exception as error:  # pyarrow raises its own types for a file that is no Parquet
        raise ConfigError(f"benchmark data {files[0]}: not a readable Parquet file ({error})") from error



def read_tsv(path: Path) -> tuple[list[str], Iterator[HubRow]]:
    """VLMEvalKit's TSV: every cell a string (pandas' type guessing would turn an `index` of 1 into 1.0 and an
    option `None` into NaN); a row with the wrong number of cells, or with bytes that are not UTF-8, is a row error;
    an `image` cell of at most 64 characters is the index of the row whose image it repeats."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a base64 image is one cell of megabytes
    with path.open(newline="", encoding="utf-8", errors="surrogateescape") as handle:
        reader = csv.reader(handle, delimiter="\t")
        header = next(reader, None)
        if not header:
            raise ConfigError(f"benchmark data {path}: empty TSV file (it needs a header line: index, image, ...)")
        rows: list[dict[str, object]] = []
        for line, cells in enumerate(reader, start=2):
            if not cells:
                continue
            rows.append(_tsv_row(header, cells, line))
    return header, iter(_with_shared_images(rows))


def _tsv_row(header: list[str], cells: list[str], line: int) -> dict[str, object]:
    row: dict[str, object] = dict(zip(header, cells))
    if len(cells) != len(header):
        row[ROW_ERROR] = f"line {line} has {len(cells)} cells for {len(header)} columns (a tab or quote out of place?)"
    bad = [c for c, v in row.items() if isinstance(v, str) and _has_surrogate(v)]
    if bad:
        row[ROW_ERROR] = f"line {line}: column(s) {bad} hold text that is not valid UTF-8"
    return row


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _with_shared_images(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    images = {str(r.get("index")): r.get("image") for r in rows
              if isinstance(r.get("image"), str) and len(str(r.get("image"))) > _IMAGE_REFERENCE_MAX}
    for row in rows:
        cell = row.get("image")
        if isinstance(cell, str) and 0 < len(cell) <= _IMAGE_REFERENCE_MAX and ROW_ERROR not in row \
                and not is_url(cell):  # a URL is refused as one (`spec_paths.image_file`), never read
            if cell.strip() not in images:
                row[ROW_ERROR] = f"column 'image' holds '{cell[:40]}', which is no image and no row's index"
            else:
                row["image"] = images[cell.strip()]
    return rows


def read_jsonl(path: Path) -> tuple[list[str], Iterator[HubRow]]:
    """One JSON object per line; a line that is not one is a row error with its line number."""
    rows: list[dict[str, object]] = []
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (UnicodeDecodeError, ValueError) as error:
                rows.append({ROW_ERROR: f"line {line} is not a JSON object ({type(error).__name__}: {error})"})
                continue
            rows.append(value if isinstance(value, dict) else
                        {ROW_ERROR: f"line {line} is a JSON {type(value).__name__}, not an object"})
    columns = list(dict.fromkeys(c for r in rows for c in r if c != ROW_ERROR))
    return columns, iter(rows)

