"""The demo benchmark: seeded generation, hub-schema rows, parsing and scoring."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mai.evals.base import BadRow, ScoredSample
from mai.evals.demo import DemoBenchmark, generate_demo_rows
from mai.types import Sample

BENCH = DemoBenchmark()


def mc_sample(answer: str = "B") -> Sample:
    return Sample(sample_id="m", benchmark="demo", question="What color is the circle?",
                  options=("red", "blue", "green", "yellow"), answer=answer, image_paths=(), image_sha256=(),
                  category="attribute", content_hash="h", answer_style="letter")


def yes_no_sample() -> Sample:
    return Sample(sample_id="y", benchmark="demo", question="Is there a red circle?", options=(), answer="yes",
                  image_paths=(), image_sha256=(), category="presence", content_hash="h2", answer_style="phrase")


def test_generation_is_seeded_and_mixes_question_families() -> None:
    rows = generate_demo_rows(30, seed=5)
    assert rows == generate_demo_rows(30, seed=5)
    assert rows != generate_demo_rows(30, seed=6)
    assert {r["category"] for r in rows} == {"presence", "attribute", "counting"}
    assert all(r["answer"] in ("yes", "no") for r in rows if r["category"] == "presence")
    assert all(r["answer"] in "ABCD" and r["A"] for r in rows if r["category"] != "presence")


@pytest.mark.parametrize(("text", "parsed"), [
    ("[[B]]", "B"), ("[[B. blue]]", "B"), ("The answer is (C).", "C"), ("[[blue]]", "B"), ("[[E]]", None),
    ("[[Blue and red]]", None), ("DA BC", None),
])
def test_letter_parsing(text: str, parsed: str | None) -> None:
    assert BENCH.parse_answer(text, mc_sample()) == parsed


@pytest.mark.parametrize(("text", "parsed"), [
    ("[[Yes]]", "yes"), ("no, there is none", "no"), ("[[yesno]]", None), ("maybe", None),
])
def test_yes_no_parsing(text: str, parsed: str | None) -> None:
    assert BENCH.parse_answer(text, yes_no_sample()) == parsed


def test_scoring_agreement_and_aggregates() -> None:
    assert BENCH.score("B", mc_sample()) == 1.0 and BENCH.score(None, mc_sample()) == 0.0
    assert BENCH.agree("yes", "yes", yes_no_sample()) and not BENCH.agree(None, None, yes_no_sample())
    first, second = yes_no_sample(), replace(mc_sample(), category="y")
    metrics = BENCH.aggregate([ScoredSample(replace(first, category="x"), "yes", 1.0), ScoredSample(second, None, 0.0)])
    values = {(m.name, m.subset): m.value for m in metrics}
    assert values[("accuracy", "overall")] == 0.5 and values[("unparsed_rate", "overall")] == 0.5
    assert values[("accuracy", "category=x")] == 1.0


def test_bad_rows_name_their_problem() -> None:
    row = generate_demo_rows(2, seed=1)[1]
    with pytest.raises(BadRow, match="'question'"):
        BENCH.parse_row({**row, "question": ""}, 0)
    with pytest.raises(BadRow, match="not one of the option letters"):
        BENCH.parse_row({**row, "answer": "Z"}, 0)
    with pytest.raises(BadRow, match="'image'"):
        BENCH.parse_row({**row, "image": {"bytes": None}}, 0)
