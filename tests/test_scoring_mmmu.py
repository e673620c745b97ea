"""MMMU: prompt layout, multiple-choice parsing per profile, open-answer matching, the 2025 bug profile."""

from __future__ import annotations

import pytest

from mai.evals.mmmu import MMMUBenchmark, eval_open, parse_multi_choice, parse_open_response
from mai.scoring import score_outputs
from mai.types import Sample

BENCH = MMMUBenchmark()
CHOICES = {"A": "450", "B": "500", "C": "400", "D": "600"}


def mc(answer: str = "C", subject: str = "Economics") -> Sample:
    return Sample(sample_id=f"mmmu-{subject}-{answer}", benchmark="mmmu", question="<image 1> What is real GDP?",
                  options=tuple(CHOICES.values()), answer=answer, image_paths=(), image_sha256=(), category=subject,
                  content_hash="h", answer_style="letter", meta=(("question_type", "multiple-choice"),))


def open_q(answer: str, subject: str = "Math") -> Sample:
    return Sample(sample_id=f"mmmu-open-{answer}", benchmark="mmmu", question="Compute x.", options=(), answer=answer,
                  image_paths=(), image_sha256=(), category=subject, content_hash="h", answer_style="phrase",
                  meta=(("question_type", "open"),))


def test_prompt_layout_and_row_conversion() -> None:
    assert BENCH.format_question(mc()) + "\nInstr" == (
        "<image 1> What is real GDP?\nA. 450\nB. 500\nC. 400\nD. 600\n\nInstr")
    assert BENCH.format_question(open_q("1")) + "\nInstr" == "Compute x.\n\nInstr"
    row = {"id": "validation_Art_Theory_12", "question": "Compare <image 2> and <image 1>.",
           "options": "['x', 'y']", "answer": "B", "question_type": "multiple-choice",
           "image_1": {"bytes": b"1"}, "image_2": {"bytes": b"2"}, "image_3": {"bytes": b"3"}}
    fields = BENCH.parse_row(row, 0)
    assert fields.category == "Art_Theory" and fields.options == ("x", "y")
    assert fields.images == (b"1", b"2")  # referenced only, in name order
    with pytest.raises(ValueError, match="not a list literal"):
        BENCH.parse_row({**row, "options": "['x', "}, 0)


@pytest.mark.parametrize(("response", "lmms_eval", "official"), [
    ("(C)", "C", "C"),
    ("C", "C", "C"),
    ("C.", "C", "C"),            # trailing punctuation is stripped first
    ("The answer is C. ok", "C", None),   # 'C.' rule exists only in lmms-eval; ' C ' absent
    ("Answer: B, not (C)", "B", "C"),     # the Answer: marker (lmms-eval) vs the bracket (official)
    ("(A) or maybe (D)", "D", "D"),       # several hits: the last occurrence
    ("I am not sure at all here", None, None),  # never a random letter
    ("The equilibrium real GDP here is 400 billion", "C", "C"),  # option text, response over 5 words
    ("400", None, None),                  # option text only counts for long responses
])
def test_multiple_choice_parsing(response: str, lmms_eval: str | None, official: str | None) -> None:
    assert parse_multi_choice(response, CHOICES, "lmms-eval") == lmms_eval
    assert parse_multi_choice(response, CHOICES, "official") == official


@pytest.mark.parametrize(("gold", "response", "correct"), [
    ("0.5", "Therefore the answer is 0.5", True),
    ("0.5", "so the result is 0.499", True),      # both round to 0.5 at 2 decimals
    ("0.5", "the answer is 0.51", False),
    ("1,000", "answer 1000", True),
    ("3.14159", "It is 3.14", True),
    ("blue", "the sky is light blue today", True),  # string gold contained in the prediction
    ("light blue", "blue", False),
    ("6", "there are 6 apples", True),
])
def test_open_answers(gold: str, response: str, correct: bool) -> None:
    assert eval_open(gold, parse_open_response(response)) is correct


def test_profiles_and_aggregates() -> None:
    outputs = [(mc("C"), "[[C]]"), (mc("A", "Art"), "[[B]]"), (open_q("0.5"), "Therefore the answer is 0.5"),
               (open_q("7"), "[[7]]")]
    _, fixed = score_outputs(BENCH, outputs, "lmms-eval")
    _, buggy = score_outputs(BENCH, outputs, "lmms-eval-2025")
    value = {(m.name, m.subset): m.value for m in fixed}
    assert value[("accuracy", "overall")] == 0.75
    assert value[("accuracy", "question_type=open")] == 1.0
    assert value[("accuracy", "domain=Business")] == 1.0 and value[("accuracy", "domain=Art and Design")] == 0.0
    assert value[("accuracy", "subject=Math")] == 1.0
    bug = {(m.name, m.subset): m.value for m in buggy}
    assert bug[("accuracy", "question_type=open")] == 0.0 and bug[("accuracy", "overall")] == 0.25
    assert BENCH.agree("the answer is 0.5", "0.50", open_q("0.5"))
