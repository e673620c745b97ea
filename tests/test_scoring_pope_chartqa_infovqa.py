"""Scoring edge cases of POPE, ChartQA and InfoVQA under both scorer profiles."""

from __future__ import annotations

import pytest

from mai.evals.chartqa import ChartQABenchmark, relaxed_correctness
from mai.evals.common import anls
from mai.evals.infovqa import InfoVQABenchmark
from mai.evals.pope import PopeBenchmark
from mai.scoring import score_outputs
from mai.types import Sample


def sample(bench: str, answer: str, category: str = "c", references: tuple[str, ...] = ()) -> Sample:
    return Sample(sample_id=f"{bench}-{answer}-{category}", benchmark=bench, question="q?", options=(), answer=answer,
                  image_paths=(), image_sha256=(), category=category, content_hash="h", answer_style="phrase",
                  references=references or (answer,))


def metric(metrics: list, name: str, subset: str = "overall") -> float:  # type: ignore[type-arg]
    return next(m.value for m in metrics if m.name == name and m.subset == subset)


def test_pope_f1_can_exceed_accuracy_because_non_yes_no_answers_are_ignored_by_precision_and_recall() -> None:
    outputs = [(sample("pope", "yes"), "[[yes]]"), (sample("pope", "yes"), "[[Yes.]]"),
               (sample("pope", "no"), "no"), (sample("pope", "no"), "[[there is none]]")]
    _, metrics = score_outputs(PopeBenchmark(), outputs, "lmms-eval")
    assert metric(metrics, "accuracy") == 0.5
    assert metric(metrics, "precision") == 1.0 and metric(metrics, "recall") == 1.0
    assert metric(metrics, "f1") == 1.0 > metric(metrics, "accuracy")
    assert metric(metrics, "unparsed_rate") == 0.5


def test_pope_official_profile_maps_every_answer_to_yes_or_no() -> None:
    bench = PopeBenchmark()
    assert bench.parse_answer("[[Yes.]]", sample("pope", "yes"), "official") == "yes"
    assert bench.parse_answer("There is not a dog. No.", sample("pope", "no"), "official") == "no"
    assert bench.parse_answer("[[there is none]]", sample("pope", "no"), "official") == "yes"
    outputs = [(sample("pope", "yes", "random"), "[[Yes.]]"), (sample("pope", "no", "popular"), "No, not here")]
    scored, metrics = score_outputs(bench, outputs, "official")
    assert [s.score for s in scored] == [1.0, 1.0]
    assert metric(metrics, "accuracy", "category=random") == 1.0


@pytest.mark.parametrize(("prediction", "target", "correct"), [
    ("45", "45", True), ("45%", "45", False), ("45", "45%", False), ("0.45", "45%", True),
    ("104.9", "100", True), ("105.1", "100", False), ("95", "100", True),
    ("0", "0", True), ("0.0", "0", False), ("0.01", "0", False),  # target 0: string equality
    ("Yes", "yes", True), ("1,000", "1000", False),
])
def test_chartqa_relaxed_correctness(prediction: str, target: str, correct: bool) -> None:
    assert relaxed_correctness(prediction, target) is correct


def test_chartqa_aggregates_by_split_and_agreement_is_symmetric() -> None:
    bench = ChartQABenchmark()
    outputs = [(sample("chartqa", "10", "human"), "[[10.2]]"), (sample("chartqa", "7", "augmented"), "[[8]]"),
               (sample("chartqa", "red", "augmented"), "Red")]
    _, metrics = score_outputs(bench, outputs)
    assert metric(metrics, "relaxed_accuracy") == pytest.approx(2 / 3)
    assert metric(metrics, "relaxed_accuracy", "split=human") == 1.0
    assert metric(metrics, "relaxed_accuracy", "split=augmented") == 0.5
    s = sample("chartqa", "100")
    assert bench.agree("100", "104", s) and bench.agree("104", "100", s) and not bench.agree("100", "110", s)


def test_anls_exactly_half_is_kept_by_the_scripts_and_zeroed_by_the_paper_formula() -> None:
    assert anls("abxy", ("abcd",), "lmms-eval") == 0.5 == anls("abxy", ("abcd",), "official")
    assert anls("abxy", ("abcd",), "anls-paper") == 0.0
    assert anls("abxyz", ("abcd",), "lmms-eval") == 0.0  # 1 - 3/5 = 0.4 < 0.5
    assert anls("ABCD", ("abcd",), "anls-paper") == 1.0
    assert anls("abcz", ("xxxx", "abcd"), "lmms-eval") == 0.75  # best reference wins
    # the scripts divide by the raw (unnormalised) lengths
    assert anls("abxy", ("  abcd  ",), "lmms-eval") == 0.75
    assert anls("abxy", ("  abcd  ",), "anls-paper") == 0.0
    assert anls("", ("",), "lmms-eval") == 1.0


def test_infovqa_scores_against_every_reference_and_agrees_by_anls() -> None:
    bench = InfoVQABenchmark()
    s = sample("infovqa", "10 million", references=("10 million", "10m"))
    scored, metrics = score_outputs(bench, [(s, "[[10m]]"), (s, "nothing like it")])
    assert [x.score for x in scored] == [1.0, 0.0]
    assert metric(metrics, "anls") == 0.5
    assert bench.agree("10 million", "10 millions", s) and not bench.agree("10 million", "blue", s)
