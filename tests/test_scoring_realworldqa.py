"""RealWorldQA: the June-2026 LMMs-Eval letter extraction, the earlier filter pipeline, plain exact match."""

from __future__ import annotations

import json

import pytest

from mai.evals.realworldqa import RealWorldQABenchmark, extract_mcq_answer
from mai.scoring import read_prediction_lines, score_outputs
from mai.types import Sample

BENCH = RealWorldQABenchmark()
MCQ = ("Which way is the road turning?\nA. Left\nB. Right\nC. Straight\n"
       "Please answer directly with only the letter of the correct option and nothing else.")


def sample(question: str, answer: str) -> Sample:
    """Through the same row conversion as `mai score` (no images needed)."""
    line = read_prediction_lines(BENCH, [json.dumps({"question": question, "answer": answer, "prediction": ""})])[0]
    assert line.sample is not None
    return line.sample


@pytest.mark.parametrize(("response", "letter"), [
    ("B.", "B"), ("(C)", "C"), ("A car is parked", "A"), ("Left", ""), ("c", ""), ("Downhill", "D"),
    ("The answer is B. Because A is wrong", "A"),   # LMMs-Eval's phrase quirk: the later letter wins
    ("I think the answer is B", "B"),               # a letter at the end
])
def test_extract_mcq_answer_priorities(response: str, letter: str) -> None:
    assert extract_mcq_answer(response) == letter


def test_letter_extraction_from_a_sentence_and_profiles() -> None:
    mcq, open_q = sample(MCQ, "B"), sample("How many cars are there? Please answer directly with a single number.", "3")
    assert BENCH.format_question(mcq).endswith("C. Straight\n")  # the letter-only instruction is removed
    outputs = [(mcq, "[[The answer is (B)]]"), (mcq, "Right"), (open_q, "three"), (open_q, "3.")]
    scored, metrics = score_outputs(BENCH, outputs, "lmms-eval")
    assert [s.score for s in scored] == [1.0, 0.0, 0.0, 1.0]
    scored, _ = score_outputs(BENCH, outputs, "lmms-eval-0.7.1")
    assert [s.score for s in scored] == [0.0, 1.0, 1.0, 1.0]  # option text -> letter, number words -> digits
    scored, _ = score_outputs(BENCH, outputs, "official")
    assert [s.score for s in scored] == [0.0, 0.0, 0.0, 1.0]
    values = {(m.name, m.subset): m.value for m in metrics}
    assert values[("exact_match", "overall")] == 0.5 and values[("exact_match", "question_type=open")] == 0.5
