"""`shapes`: the synthetic benchmark of the trained tiny world (generator in `shapes_world`).

Rows use the MMBench-style hub schema (`index, question, hint, A..D, answer, category, image`); `category` is
the question family. Each family is parsed and scored the way the benchmark it mirrors is:
- `presence`: POPE (only an exact `yes`/`no` after strip + lower counts); prompt 1 (S2-style) for RT;
- `counting`, `two_step`: ChartQA relaxed accuracy on the number; prompt 1 for RT;
- `attribute`: MMBench-style option letter; prompt 2 (reference answer) for RT.
Metrics: accuracy overall and per family, POPE precision/recall/F1 on `presence`, the unparsed share.
Splits `train`, `validation` and `test` share no item (`mai build-shapes`).
"""

from __future__ import annotations

from mai.answers import answer_span
from mai.evals.base import (
    BadRow,
    HubRow,
    Metric,
    RowFields,
    ScoredSample,
    image_bytes,
    row_id,
)
from mai.evals.chartqa import relaxed_correctness
from mai.evals.common import mean_accuracy, text_field
from mai.evals.demo import LETTERS, DemoBenchmark, parse_letter
from mai.evals.pope import pope_metrics
from mai.evals.shapes_world import FAMILIES
from mai.types import Sample

NUMERIC = ("counting", "two_step")


class ShapesBenchmark(DemoBenchmark):
    """The demo's row schema, answer styles, RT templates and MMBench question layout; its own families."""

    name = "shapes"
    version = "1"
    agreement_rule = "exact_match_after_parsing (numbers: relaxed match)"

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        family = text_field(row, "category")
        if family not in FAMILIES:
            raise BadRow(f"column 'category' must be one of {list(FAMILIES)}, got '{family}'")
        options = tuple(str(row[k]) for k in LETTERS if row.get(k) not in (None, ""))
        answer = text_field(row, "answer").strip()
        _check_answer(family, answer, options)
        return RowFields(
            sample_id=row_id(self.name, self.id_column, row, index), question=text_field(row, "question"),
            options=options, answer=answer, category=family,
            images=(image_bytes(row.get("image"), "image"),) if with_images else (),
        )

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        span = answer_span(text).strip()
        if sample.options:
            return parse_letter(span, sample.options)
        if sample.category == "presence":
            candidate = span.lower()
            return candidate if candidate in ("yes", "no") else None
        return span or None

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        if a is None or b is None:
            return False
        if sample.category in NUMERIC:
            return relaxed_correctness(a, b) or relaxed_correctness(b, a)
        return a == b

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        if parsed is None:
            return 0.0
        if sample.category in NUMERIC:
            return 1.0 if relaxed_correctness(parsed, sample.answer) else 0.0
        return 1.0 if parsed == sample.answer else 0.0

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        presence = [s for s in scored if s.sample.category == "presence"]
        pope = [m for m in pope_metrics(presence, "category=presence", "official") if m.name != "accuracy"]
        return mean_accuracy(scored) + pope


def _check_answer(family: str, answer: str, options: tuple[str, ...]) -> None:
    if family == "attribute" and answer not in LETTERS[: len(options)]:
        raise BadRow(f"answer '{answer}' is not one of the option letters {LETTERS[: len(options)]}")
    if family == "presence" and answer not in ("yes", "no"):
        raise BadRow(f"a presence answer must be yes or no, got '{answer}'")
    if family in NUMERIC and not answer.lstrip("-").isdigit():
        raise BadRow(f"a {family} answer must be a whole number, got '{answer}'")
