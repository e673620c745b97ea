"""MMBench on input it did not expect: rows without a usable `index` become per-row errors (never a crash, in
`mai score` and in a run's loader), and answers that `can_infer` leaves open are resolved the way LMMs-Eval's
offline task `mmbench_en_dev_static` resolves them (`extract_mcq_answer`) under the default profile."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image

from mai.evals.base import BadRow
from mai.evals.loading import rows_to_samples
from mai.evals.mmbench import MMBenchBenchmark, infer_option
from mai.scoring import read_prediction_lines, score_outputs
from mai.types import Sample

BENCH = MMBenchBenchmark()
ROW: dict[str, Any] = {"index": 7, "question": "What color?", "hint": "nan", "A": "red", "B": "green", "C": "blue",
                       "D": None, "answer": "B", "category": "color"}


def sample(index: int, answer: str, category: str = "color") -> Sample:
    return Sample(sample_id=f"mmbench-{index}", benchmark="mmbench", question="What color?",
                  options=("red", "green", "blue"), answer=answer, image_paths=(), image_sha256=(), category=category,
                  content_hash="h", answer_style="letter", meta=(("hint", ""), ("index", str(index)), ("letters", "ABC")))


@pytest.mark.parametrize("index", [None, "abc", "", "  ", "1.5", 1.5, float("nan"), float("inf"), True, [1], {"a": 1},
                                   "1" * 40, "0x10", "١٢"])
def test_an_unusable_index_is_a_bad_row_with_its_reason(index: object) -> None:
    row = {**ROW, "index": index}
    with pytest.raises(BadRow, match="column 'index'"):
        BENCH.parse_row(row, 0, with_images=False)


def test_a_row_without_index_is_a_bad_row() -> None:
    row = {key: value for key, value in ROW.items() if key != "index"}
    with pytest.raises(BadRow, match="column 'index' is missing"):
        BENCH.parse_row(row, 0, with_images=False)


@pytest.mark.parametrize(("index", "stored"), [(7, "7"), (7.0, "7"), ("1000007", "1000007"), (" 12 ", "12"),
                                               (-3, "-3")])
def test_integer_indices_in_any_spelling_are_kept(index: object, stored: str) -> None:
    fields = BENCH.parse_row({**ROW, "index": index}, 0, with_images=False)
    assert dict(fields.meta)["index"] == stored


def test_mai_score_reports_bad_index_lines_and_scores_the_rest() -> None:
    rows = [{**ROW, "index": 1, "prediction": "[[B]]"}, {**ROW, "index": "one", "prediction": "[[B]]"},
            {k: v for k, v in ROW.items() if k != "index"} | {"prediction": "[[B]]"},
            {**ROW, "index": 1_000_001, "prediction": "[[B]]"}]
    lines = read_prediction_lines(BENCH, [json.dumps(row) for row in rows])
    assert [line.error is None for line in lines] == [True, False, False, True]
    assert "column 'index' must be an integer" in (lines[1].error or "")
    assert "column 'index' is missing" in (lines[2].error or "")
    _, metrics = score_outputs(BENCH, [(line.sample, line.prediction) for line in lines if line.sample is not None])
    values = {(m.name, m.subset): (m.value, m.n) for m in metrics}
    assert values[("circular_accuracy", "overall")] == (1.0, 1)
    assert values[("row_accuracy", "overall")] == (1.0, 2)


def test_a_run_records_bad_index_rows_as_errors() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, format="PNG")
    image = {"bytes": buffer.getvalue(), "path": None}
    rows = iter([{**ROW, "index": 1, "image": image}, {**ROW, "index": "x1", "image": image},
                 {**{k: v for k, v in ROW.items() if k != "index"}, "image": image}])
    samples = rows_to_samples(BENCH, rows, lambda encoded: ("images/x.png", "sha"))
    assert [s.error is None for s in samples] == [True, False, False]
    assert all("column 'index'" in (s.error or "") for s in samples[1:])


def test_a_stored_sample_with_an_odd_index_counts_as_its_own_question() -> None:
    """Shards written before rows were checked may hold any index text; aggregating must not stop on it."""
    odd = replace(sample(0, "A"), sample_id="mmbench-odd", meta=(("index", "n/a"), ("letters", "ABC")))
    _, metrics = score_outputs(BENCH, [(sample(1, "A"), "[[A]]"), (odd, "[[C]]")])
    values = {(m.name, m.subset): (m.value, m.n) for m in metrics}
    assert values[("circular_accuracy", "overall")] == (0.5, 2)


# --- answers can_infer leaves open: LMMs-Eval 0.7.x mmbench_en_dev_static ------------------------------------

CHOICES = {"A": "red", "B": "green", "C": "blue"}


@pytest.mark.parametrize(("output", "static", "why"), [
    ("A or B", "A", "a letter starting the text comes first"),
    ("Both A and C are wrong; B", "B", "then a letter ending it"),
    ("I would say (B) or maybe (C)", "C", "then the later (X)"),
    ("It is between A. and C.", "C", "trailing punctuation is stripped first, so C ends the text"),
    ("Not A nor B and I pick C here", "C", "an answer phrase beats letters merely followed by a space"),
    ("green or blue", None, "two option texts and no letter: still unparsed"),
    ("D or C", "C", "only the present letters (A-C) are looked for: D does not start the text for it"),
])
def test_the_default_profile_resolves_what_can_infer_leaves_open(output: str, static: str | None, why: str) -> None:
    assert infer_option(output, CHOICES, "lmms-eval") is None, "can_infer alone reads none of these"
    assert BENCH.parse_answer(f"[[{output}]]", sample(1, "A")) == static, why


def test_the_official_profile_still_guesses_nothing() -> None:
    assert BENCH.parse_answer("[[A or B]]", sample(1, "A"), "official") is None
    assert BENCH.parse_answer("[[Both A and C are wrong; B]]", sample(1, "A"), "official") is None


def test_what_can_infer_reads_is_not_second_guessed() -> None:
    # can_infer: exactly one bare letter (C); extract_mcq_answer would have taken the leading B
    assert BENCH.parse_answer("[[B, C]]", sample(1, "A")) == "C"
    assert BENCH.parse_answer("[[I think it is blue]]", sample(1, "A")) == "C"  # option text


def test_resolved_answers_count_in_circular_accuracy() -> None:
    outputs = [(sample(1, "A"), "[[A or B]]"), (sample(1_000_001, "B"), "[[Both A and C are wrong; B]]"),
               (sample(2, "C"), "[[green or blue]]")]
    _, metrics = score_outputs(BENCH, outputs)
    values = {(m.name, m.subset): m.value for m in metrics}
    assert values[("circular_accuracy", "overall")] == 0.5
    assert math.isclose(values[("unparsed_rate", "overall")], 1 / 3)
