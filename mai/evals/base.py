"""The benchmark interface. A benchmark is one short module implementing this protocol plus one line in
`mai.evals.registry`; the cascade and the scorers only ever talk to it through these methods."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypedDict

from mai.types import AnswerStyle, Sample

# One benchmark row as `datasets` (or a JSONL predictions file) yields it: column name -> cell. Cells are left
# unchecked on purpose: a hub export can hold None, NaN, a number or a list where a string belongs, and such a row
# must become a recorded per-sample error, not a crash; `parse_row` narrows each cell it reads (`text_field`,
# `image_bytes`, ...) and raises `BadRow` with the reason. Each benchmark's module docstring lists
# the columns it reads.
HubRow = Mapping[str, object]


class ImageCell(TypedDict):
    """An image cell in the hub's `Image` feature layout, undecoded."""

    bytes: bytes | None
    path: str | None


class BadRow(ValueError):
    """A benchmark row that cannot become a usable sample; the message is the recorded reason."""


@dataclass(frozen=True)
class RowFields:
    """A row converted to the fields every benchmark shares; images still as encoded bytes."""

    sample_id: str
    question: str
    options: tuple[str, ...]
    answer: str
    images: tuple[bytes, ...]
    category: str
    references: tuple[str, ...] = ()
    meta: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    n: int
    subset: str = "overall"
    unit: str = "fraction"


@dataclass(frozen=True)
class ScoredSample:
    sample: Sample
    parsed: str | None
    score: float


class Benchmark(Protocol):
    """`profile` names a scorer profile (`profiles[0]` is the default): where LMMs-Eval changed over time
    or differs from the official definition, each behaviour is a named profile, recorded with every score.
    Routing (mutual verification) always parses with the default profile."""

    name: str
    # bump when question formatting or parsing changes: it is part of every generation identity
    version: str
    agreement_rule: str
    required_columns: tuple[str, ...]
    image_columns: tuple[str, ...]
    id_column: str  # the stable id of a row (its position when the column is absent)
    profiles: tuple[str, ...]

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields: ...
    def answer_style(self, sample: Sample) -> AnswerStyle: ...
    def rt_template(self, sample: Sample) -> str: ...
    def format_question(self, sample: Sample) -> str: ...
    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None: ...
    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool: ...
    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float: ...
    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]: ...


def content_hash(
    question: str, options: tuple[str, ...], image_sha256: tuple[str, ...], meta: tuple[tuple[str, str], ...] = ()
) -> str:
    """Hash of what a model can see of a sample (question, options, images, fields such as a hint); not the
    reference answers, which cannot change an output."""
    payload = json.dumps({"q": question, "o": list(options), "i": list(image_sha256), "m": [list(m) for m in meta]},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def row_id(benchmark: str, id_column: str, row: HubRow, index: int) -> str:
    """`<benchmark>-<id>`: the same for a good row and for a bad row reported as an error."""
    value = row.get(id_column)
    return f"{benchmark}-{index if value is None or str(value).strip() == '' else value}"


def natural_order(sample_id: str) -> tuple[str, int, str]:
    """A sort key that puts shapes-2 before shapes-10."""
    head, _, tail = sample_id.rpartition("-")
    return (head, int(tail), "") if tail.isdigit() else (sample_id, 0, sample_id)


def image_bytes(value: object, column: str) -> bytes:
    """Bytes of an image cell in the hub's `Image` feature layout ({"bytes", "path"}) or raw bytes."""
    if isinstance(value, dict):
        value = value.get("bytes")
    if isinstance(value, (bytes, bytearray)) and len(value) > 0:
        return bytes(value)
    raise BadRow(f"column '{column}' holds no image bytes")
