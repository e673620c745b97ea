"""ChartQA (lmms-lab-encoder/ChartQA, split test, 2500 rows: 1250 human-written, 1250 augmented).

Hub columns: type (`human_test` / `augmented_test`), question, answer, image. Prompt: the question +
the paper's phrase-style instruction (LMMs-Eval's post-prompt is "\\nAnswer the question with a single
word."). Metric: relaxed accuracy overall and per split (`human`, `augmented`).

Relaxed correctness (identical in both profiles; LMMs-Eval copies pix2struct's official function):
a prediction and target that both parse as floats (a trailing `%` divides by 100, commas are not
numbers) match within 5 % relative to the target; a target of 0 (or non-numeric) falls back to
case-insensitive string equality. So "45%" (0.45) does not match the target "45".
Agreement: relaxed match in either direction.
"""

from __future__ import annotations

import math
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, DecimalException

from mai.answers import answer_span
from mai.evals.base import BadRow, HubRow, Metric, RowFields, ScoredSample, row_id
from mai.evals.common import HubBenchmark, grouped_mean, images_from, overall_mean, text_field, unparsed_rate
from mai.types import Sample

SPLITS = {"human_test": "human", "augmented_test": "augmented"}


class ChartQABenchmark(HubBenchmark):
    name = "chartqa"
    version = "1"
    agreement_rule = "relaxed_match_either_way"
    required_columns = ("type", "question", "answer", "image")
    id_column = "index"

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        split = text_field(row, "type")
        if split not in SPLITS:
            raise BadRow(f"column 'type' must be one of {sorted(SPLITS)}, got '{split}'")
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=text_field(row, "question"),
                         options=(), answer=text_field(row, "answer").strip(),
                         images=images_from(row, self.image_columns, with_images), category=SPLITS[split])

    def rt_template(self, sample: Sample) -> str:
        return "rt_s2_style"

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        span = answer_span(text).strip()
        return span or None

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        return a is not None and b is not None and (relaxed_correctness(a, b) or relaxed_correctness(b, a))

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        return 1.0 if parsed is not None and relaxed_correctness(parsed, sample.answer) else 0.0

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        return (overall_mean(scored, "relaxed_accuracy")
                + grouped_mean(scored, "relaxed_accuracy", lambda s: s.sample.category, "split")
                + unparsed_rate(scored))


def to_float(text: str) -> float | None:
    try:
        if text.endswith("%"):
            return float(text.rstrip("%")) / 100.0
        return float(text)
    except ValueError:
        return None


# Decimal arithmetic for numbers past the float range: exponents of any size, results correctly rounded to 60
# digits (exact enough for a 5 % tolerance), no signal raised (an invalid operation gives NaN, which compares False)
_WIDE = Context(prec=60, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])


def _to_decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text.rstrip("%") if text.endswith("%") else text)
    except DecimalException:  # a literal such as '1e99999999999999999999' is past even Decimal's exponents
        return None
    if not value.is_finite():
        return None
    return _WIDE.scaleb(value, -2) if text.endswith("%") else value


def _relaxed_wide(prediction: str, target: str, max_relative_change: float) -> bool | None:
    """The relaxed match computed in Decimal, for numbers a float holds only as infinity (a long digit string);
    None when either is not a finite Decimal (a literal 'inf', an exponent past Decimal's range)."""
    p, t = _to_decimal(prediction), _to_decimal(target)
    if p is None or t is None:
        return None
    difference = _WIDE.abs(_WIDE.subtract(p, t))
    return bool(difference <= _WIDE.multiply(_WIDE.abs(t), Decimal(repr(max_relative_change))))


def relaxed_correctness(prediction: str, target: str, max_relative_change: float = 0.05) -> bool:
    prediction_float, target_float = to_float(prediction), to_float(target)
    if prediction_float is not None and target_float:
        if math.isinf(prediction_float) or math.isinf(target_float):
            wide = _relaxed_wide(prediction, target, max_relative_change)
            # inf - inf is NaN, which would call two identical numbers different
            return wide if wide is not None else prediction.lower() == target.lower()
        return abs(prediction_float - target_float) / abs(target_float) <= max_relative_change
    return prediction.lower() == target.lower()
