"""Scoring outputs without models: parse each final output with a scorer profile, score, aggregate.
Used by every run (default profile), by `mai rescore` (a stored run, another profile) and by
`mai score` (a JSONL file of benchmark rows with predictions)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mai.errors import ConfigError
from mai.evals.base import BadRow, Benchmark, Metric, ScoredSample
from mai.types import Sample


def check_profile(benchmark: Benchmark, profile: str | None) -> str:
    chosen = profile or benchmark.profiles[0]
    if chosen not in benchmark.profiles:
        raise ConfigError(f"benchmark '{benchmark.name}' has no scorer profile '{chosen}': "
                          f"choose one of {list(benchmark.profiles)}")
    return chosen


def score_outputs(
    benchmark: Benchmark, outputs: Sequence[tuple[Sample, str | None]], profile: str | None = None
) -> tuple[list[ScoredSample], list[Metric]]:
    """`outputs` pairs each sample with the raw text of its final answer (None: no answer at all)."""
    chosen = check_profile(benchmark, profile)
    scored = []
    for sample, text in outputs:
        parsed = benchmark.parse_answer(text, sample, chosen) if text is not None else None
        scored.append(ScoredSample(sample, parsed, benchmark.score(parsed, sample, chosen)))
    return scored, benchmark.aggregate(scored, chosen)


@dataclass(frozen=True)
class PredictionLine:
    line: int
    sample: Sample | None
    prediction: str | None
    error: str | None = None


def split_jsonl(data: bytes) -> list[bytes]:
    """The lines of a JSONL file's bytes, undecoded (`read_prediction_lines` decodes each on its own). Only `\\n`
    ends a line: `str.splitlines` would also cut at U+2028 or a form feed, which a JSON string may hold."""
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line starts no new one
    return [line.removesuffix(b"\r") for line in lines]


def read_prediction_lines(benchmark: Benchmark, jsonl_lines: Iterable[str | bytes]) -> list[PredictionLine]:
    """JSONL rows in the hub's own column schema plus a `prediction` field; images are optional. A line
    that cannot be used is returned with its reason (and left out of the aggregates), never dropped; that
    includes a line of bytes that is not UTF-8, text that is not JSON, and a row the benchmark rejects."""
    lines = []
    for number, text in enumerate(jsonl_lines, start=1):
        try:
            row = _json_object(_decoded(text))
            prediction = row.get("prediction")
            if not isinstance(prediction, str):
                raise BadRow("field 'prediction' is missing or not a string")
            fields = benchmark.parse_row(row, number - 1, with_images=False)
        except BadRow as error:
            lines.append(PredictionLine(number, None, None, str(error)))
            continue
        sample = Sample(sample_id=fields.sample_id, benchmark=benchmark.name, question=fields.question,
                        options=fields.options, answer=fields.answer, image_paths=(), image_sha256=(),
                        category=fields.category, content_hash="", answer_style="phrase",
                        references=fields.references or (fields.answer,), meta=fields.meta)
        lines.append(PredictionLine(number, replace(sample, answer_style=benchmark.answer_style(sample)),
                                    prediction))
    return lines


def _decoded(line: str | bytes) -> str:
    if isinstance(line, str):
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRow(f"line is not valid UTF-8 (byte 0x{line[error.start]:02x} at offset {error.start})") from error


def _json_object(text: str) -> dict[str, Any]:
    try:
        row: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadRow(f"line is not valid JSON: {error.msg} (column {error.colno})") from error
    except (ValueError, RecursionError) as error:  # integers over 4300 digits, nesting deeper than the stack
        raise BadRow(f"line is not usable JSON: {type(error).__name__}: {str(error)[:200]}") from error
    if not isinstance(row, dict):
        raise BadRow("line is not a JSON object")
    return row
