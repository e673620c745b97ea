"""MMBench: LMMs-Eval's prompt layout, per-row letter extraction per profile, CircularEval."""

from __future__ import annotations

import pytest

from mai.evals.mmbench import MMBenchBenchmark, infer_option
from mai.scoring import score_outputs
from mai.types import Sample

BENCH = MMBenchBenchmark()
CHOICES = {"A": "red", "B": "green", "C": "blue"}


def row_sample(index: int, answer: str, category: str = "color", hint: str = "") -> Sample:
    return Sample(sample_id=f"mmbench-{index}", benchmark="mmbench", question="What color?",
                  options=tuple(CHOICES.values()), answer=answer, image_paths=(), image_sha256=(), category=category,
                  content_hash="h", answer_style="letter",
                  meta=(("hint", hint), ("index", str(index)), ("letters", "ABC")))


def test_prompt_layout_matches_lmms_eval() -> None:
    question = BENCH.format_question(row_sample(1, "A"))
    assert question + "\nInstr" == "What color? There are several options:\nA. red\nB. green\nC. blue\n\nInstr"
    assert BENCH.format_question(row_sample(1, "A", hint="Look left.")).startswith("Look left. What color? There")


def test_parse_row_skips_missing_options_and_checks_the_answer() -> None:
    row = {"index": 7, "question": "Q?", "hint": "nan", "A": "x", "B": "y", "C": float("nan"), "D": None,
           "answer": "B", "category": "c", "image": {"bytes": b"png"}}
    fields = BENCH.parse_row(row, 0, with_images=False)
    assert fields.options == ("x", "y") and fields.sample_id == "mmbench-7" and dict(fields.meta)["hint"] == ""
    with pytest.raises(ValueError, match="not one of the present options"):
        BENCH.parse_row({**row, "answer": "C"}, 0, with_images=False)


@pytest.mark.parametrize(("answer", "lmms_eval", "official"), [
    ("B", "B", "B"), ("(C)", "C", "C"), ("B. green", "B", "B"), ("green", "B", "B"),
    ("The answer is C.", "C", "C"),          # 'C.' affix / punctuation to spaces
    ("A or B", None, None),                  # two letters, no option text
    ("I think it is the blue one", "C", "C"),  # option text
    ("A blue car is here", "C", "A"),       # an "A" among > 3 words may be an article (lmms-eval); official takes it
    ("purple", None, None), ("red and blue", None, None),
    ("(B),", None, "B"),                     # lmms-eval's affixes do not cover '(B),'
])
def test_letter_extraction(answer: str, lmms_eval: str | None, official: str | None) -> None:
    assert infer_option(answer, CHOICES, "lmms-eval") == lmms_eval
    assert infer_option(answer, CHOICES, "official") == official


def test_one_wrong_circular_copy_zeroes_the_question() -> None:
    outputs = [(row_sample(1, "A"), "[[A]]"), (row_sample(1_000_001, "C"), "[[C]]"), (row_sample(2_000_001, "B"), "[[A]]"),
               (row_sample(2, "B", "shape"), "[[B]]"), (row_sample(1_000_002, "A", "shape"), "[[A]]")]
    _, metrics = score_outputs(BENCH, outputs)
    values = {(m.name, m.subset): (m.value, m.n) for m in metrics}
    assert values[("circular_accuracy", "overall")] == (0.5, 2)
    assert values[("row_accuracy", "overall")] == (0.8, 5)
    assert values[("circular_accuracy", "category=color")] == (0.0, 1)
    assert values[("circular_accuracy", "category=shape")] == (1.0, 1)
