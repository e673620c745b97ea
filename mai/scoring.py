"""Scoring outputs without models: parse each final output with a scorer profile, score, aggregate.
Used by every run (default profile), by `mai rescore` (a stored run, another profile) and by
`mai score` (a JSONL file of benchmark rows with predictions)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

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


# --- `mai score`: JSONL predictions scored without a model (mai.api.score) ---------------------------------


class LineError(TypedDict):
    line: int
    error: str | None


class LineScore(TypedDict):
    line: int
    sample_id: str
    parsed: str | None
    score: float


class MetricRecord(TypedDict):
    name: str
    value: float
    n: int
    subset: str
    unit: str


class ScoreSummary(TypedDict):
    benchmark: str
    scorer_profile: str
    scored: int
    errors: list[LineError]   # the lines that could not be used, and why
    metrics: list[MetricRecord]


@dataclass(frozen=True)
class ScoreReport:
    summary: ScoreSummary
    per_line: list[LineScore | LineError]  # one record per input line: its score, or why it could not be used


def score_prediction_lines(benchmark: str, prediction_lines: Iterable[str | bytes], profile: str | None = None
                           ) -> ScoreReport:
    """Score JSONL lines (benchmark rows in the hub's column schema, or a spec's columns, plus `prediction`) without
    a model; `benchmark` is a built-in's name or a spec file. The benchmark and profile are checked before the first line is read."""
    from mai.evals.registry import benchmark_named

    chosen = benchmark_named(benchmark)
    scorer_profile = check_profile(chosen, profile)
    lines = read_prediction_lines(chosen, prediction_lines)
    usable = [(line.sample, line.prediction) for line in lines if line.sample is not None]
    scored, metrics = score_outputs(chosen, usable, scorer_profile)
    errors: list[LineError] = [{"line": line.line, "error": line.error} for line in lines if line.sample is None]
    summary: ScoreSummary = {
        "benchmark": chosen.name, "scorer_profile": scorer_profile, "scored": len(scored), "errors": errors,
        "metrics": [{"name": m.name, "value": m.value, "n": m.n, "subset": m.subset, "unit": m.unit} for m in metrics]}
    return ScoreReport(summary, _per_line(lines, scored))


def _per_line(lines: list[PredictionLine], scored: list[ScoredSample]) -> list[LineScore | LineError]:
    by_line = iter(scored)  # one scored sample per usable line, in order
    records: list[LineScore | LineError] = []
    for line in lines:
        item = next(by_line) if line.sample is not None else None
        records.append(LineScore(line=line.line, sample_id=item.sample.sample_id, parsed=item.parsed,
                                 score=item.score) if item else LineError(line=line.line, error=line.error))
    return records
