"""Property-based fuzzing of every benchmark's parser and scorer: arbitrary text (unicode, control characters,
lone surrogates, huge runs of `[[`, `]]`, digits, letters and answer phrases) never raises and finishes in
bounded time; the linear rewrites give the results of the code they replaced."""

from __future__ import annotations

import json
import random
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mai.answers import extract_bracketed
from mai.evals.common import anls, levenshtein
from mai.evals.mmmu import _NUMBER_PATTERNS
from mai.evals.registry import BENCHMARKS, get_benchmark
from mai.scoring import read_prediction_lines
from mai.types import Sample

# one row per kind of sample each benchmark has (multiple choice, open, yes/no, numeric ...), hub schema
ROWS: dict[str, list[dict[str, Any]]] = {
    "demo": [{"index": 1, "question": "Is there a red circle?", "answer": "yes", "category": "presence"},
             {"index": 2, "question": "What color?", "A": "red", "B": "green", "C": "blue", "D": "yellow",
              "answer": "B", "category": "attribute"}],
    "shapes": [{"index": 1, "question": "Is there a red circle?", "answer": "yes", "category": "presence"},
               {"index": 2, "question": "How many?", "answer": "3", "category": "counting"},
               {"index": 3, "question": "What color?", "A": "red", "B": "green", "C": "blue", "D": "yellow",
                "answer": "C", "category": "attribute"}],
    "pope": [{"question_id": 1, "question": "Is there a dog?", "answer": "yes", "category": "random"}],
    "mmbench": [{"index": 5, "question": "What color?", "hint": "nan", "A": "red", "B": "green", "C": "blue",
                 "D": None, "answer": "B", "category": "c"}],
    "mmmu": [{"id": "validation_Math_1", "question": "What? <image 1>", "options": "['1.5', 'two', 'x', 'blue car']",
              "answer": "B", "question_type": "multiple-choice"},
             {"id": "validation_Art_2", "question": "How much?", "options": "[]", "answer": "12.5",
              "question_type": "open"},
             {"id": "validation_Art_3", "question": "Who?", "options": "[]", "answer": "picasso",
              "question_type": "open"}],
    "chartqa": [{"type": "human_test", "question": "How much?", "answer": "45"},
                {"type": "augmented_test", "question": "Which?", "answer": "Asia"}],
    "realworldqa": [{"question": "Which way?\nA. left\nB. right\nC. straight\nPlease answer directly with only the "
                                 "letter of the correct option and nothing else.", "answer": "B"},
                    {"question": "How many cars?", "answer": "3"}],
    "infovqa": [{"questionId": 7, "question": "What?", "answers": ["north america", "N. America"],
                 "answer_type": "span"}],
}

# pieces whose long runs would be quadratic for a backtracking regex or a pure-Python loop
TOKENS = ("[[", "]]", "[", "]", "[[x", "x]]", "[[a]]", "A", "B ", "(C)", "D.", "E", "1", "1,", "1.", ",000", "e5",
          "-", " ", "\n", "\t", "answer:", "Answer: A ", "the answer is ", "(", "*", "yes", "no", "red", "é", "😀",
          "\x00", "\x1b", "\u202e", "\u2028", "\ud800", "答案是", ".", "=", "is ")
EVERY_CHARACTER = st.characters(exclude_categories=())  # surrogates and control characters included
RUNS = st.builds(lambda token, n: token * n, st.sampled_from(TOKENS), st.integers(0, 60_000))
TEXTS = st.lists(st.one_of(st.text(EVERY_CHARACTER, max_size=60), RUNS), max_size=5).map("".join)
# a budget per example (parse every sample under every profile, score, agree) far above what it takes
# (milliseconds; about 1 s for the largest texts, 600 kB of `[[a]]`, and 3.9 s for them on a machine at load 6,
# which failed a budget of 3 s) and far below what quadratic code takes on these sizes (hours). 100 examples per
# benchmark (250 took a quarter of the fast tier's scorer time): each still draws runs up to 600 kB, and the
# megabyte texts of tests/test_hardening_scorers.py time every call on the largest sizes
FUZZ = settings(max_examples=100, deadline=timedelta(seconds=15), database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def samples(name: str) -> list[Sample]:
    benchmark = get_benchmark(name)
    lines = read_prediction_lines(benchmark, [json.dumps({**row, "prediction": ""}) for row in ROWS[name]])
    assert all(line.sample is not None for line in lines), [line.error for line in lines]
    return [line.sample for line in lines if line.sample is not None]


def exercise(name: str, text: str, other: str = "") -> None:
    """Everything a run or `mai score` does with one output: parse (every profile), score, agree."""
    benchmark = get_benchmark(name)
    for sample in samples(name):
        for profile in benchmark.profiles:
            parsed = benchmark.parse_answer(text, sample, profile)
            assert parsed is None or isinstance(parsed, str)
            assert 0.0 <= benchmark.score(parsed, sample, profile) <= 1.0
        mine, theirs = benchmark.parse_answer(text, sample), benchmark.parse_answer(other, sample)
        assert isinstance(benchmark.agree(mine, mine, sample), bool)
        assert isinstance(benchmark.agree(mine, theirs, sample), bool)


def test_the_registry_is_covered() -> None:
    assert set(ROWS) == set(BENCHMARKS)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
@FUZZ
@given(text=TEXTS, other=st.text(EVERY_CHARACTER, max_size=300))
def test_parse_score_agree_never_raise_and_finish_fast(name: str, text: str, other: str) -> None:
    exercise(name, text, other)


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Stop a runaway call (a lazy `[[...]]` regex runs for an hour on these inputs) instead of waiting for it."""
    def expire(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# a megabyte of hostile text in one call: tests/test_hardening_scorers.py


def test_a_bracket_flood_parses_as_the_whole_output() -> None:
    with time_limit(30):
        started = time.perf_counter()
        assert extract_bracketed("[[" * 500_000) is None
        assert extract_bracketed("[[" * 500_000 + "]]") == "[[" * 499_999
        assert time.perf_counter() - started < 1.0


# --- the rewrites return what the code they replaced returned -------------------------------------------

_OLD_BRACKETED = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)


def old_extract_bracketed(text: str) -> str | None:
    matches = _OLD_BRACKETED.findall(text)
    return matches[-1].strip() if matches else None


EQUIVALENCE = settings(max_examples=600, deadline=None, database=None, derandomize=True)
BRACKETY = st.lists(st.sampled_from(["[", "]", "[[", "]]", "a", " ", "\n", "é"]), max_size=20).map("".join)


@EQUIVALENCE
@given(text=st.one_of(BRACKETY, st.text(EVERY_CHARACTER, max_size=30)))
def test_linear_bracket_extraction_matches_the_regex(text: str) -> None:
    assert extract_bracketed(text) == old_extract_bracketed(text)


def reference_levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def reference_anls(prediction: str, references: tuple[str, ...], profile: str, threshold: float = 0.5) -> float:
    """`anls` as it was, with the pure-Python distance."""
    values = []
    for reference in references:
        gt, det = " ".join(reference.strip().lower().split()), " ".join(prediction.strip().lower().split())
        distance = reference_levenshtein(gt, det)
        if profile != "anls-paper":
            length = max(len(reference.upper()), len(prediction.upper()))
        else:
            length = max(len(gt), len(det))
        values.append(0.0 if length == 0 else distance / length)
    if not values:
        return 0.0
    normalised = min(values)
    similarity = 1.0 - normalised
    if profile != "anls-paper":
        return 0.0 if similarity < threshold else similarity
    return similarity if normalised < threshold else 0.0


SHORT = st.text(st.one_of(st.sampled_from("abAB \t\nßİé😀"), EVERY_CHARACTER), max_size=14)


@EQUIVALENCE
@given(a=SHORT, b=SHORT)
def test_rapidfuzz_distance_is_the_dynamic_programme(a: str, b: str) -> None:
    assert levenshtein(a, b) == reference_levenshtein(a, b)


@EQUIVALENCE
@given(prediction=SHORT, references=st.lists(SHORT, max_size=3).map(tuple),
       profile=st.sampled_from(["lmms-eval", "official", "anls-paper"]), threshold=st.sampled_from([0.5, 0.3, 0.8]))
def test_anls_values_are_unchanged(prediction: str, references: tuple[str, ...], profile: str, threshold: float) -> None:
    assert anls(prediction, references, profile, threshold) == reference_anls(prediction, references, profile, threshold)


def test_anls_of_two_8k_answers_takes_milliseconds() -> None:
    rng = random.Random(1)
    a, b = ("".join(rng.choice("abcd ") for _ in range(8_000)) for _ in range(2))
    started = time.perf_counter()
    assert anls(a, (b,), "lmms-eval") == 0.0  # distance 4382 of 8000
    assert levenshtein(" ".join(a.split()), " ".join(b.split())) == 4382
    close = a[:4_000] + "X" + a[4_001:]
    assert anls(close, (a,), "lmms-eval") == pytest.approx(1 - 1 / 8_000)
    assert time.perf_counter() - started < 1.0  # the pure-Python distance takes ~20 s for the first pair
    assert levenshtein(a[:700], b[:700]) == reference_levenshtein(a[:700], b[:700])


def test_agreement_and_anls_of_two_different_megabyte_answers_do_not_stall() -> None:
    """Two different 900 KB answers: the exact distance is quadratic (~10 s per call); within the affordable band
    (AFFORDABLE_DISTANCE_CELLS) they are apart, so ANLS 0 and no agreement, at once. A pair within the band keeps its
    exact value."""
    from mai.evals.common import AFFORDABLE_DISTANCE_CELLS
    from mai.evals.registry import get_benchmark

    rng = random.Random(2)
    words = ["north", "america", "revenue", "2019", "the", "chart", "shows", "of", "in", "percent"]
    a, b = (" ".join(rng.choice(words) for _ in range(150_000))[:900_000] for _ in range(2))
    infovqa, sample = get_benchmark("infovqa"), None
    started = time.process_time()
    assert anls(a, (b,), "lmms-eval") == 0.0 and anls(a, (b,), "anls-paper") == 0.0
    assert not infovqa.agree(a, b, sample)  # type: ignore[arg-type]  # agree reads no field of the sample
    assert time.process_time() - started < 2.0  # CPU seconds; ~10 s per call when the whole distance was computed
    edits = AFFORDABLE_DISTANCE_CELLS // len(a) // 2
    near = "".join("Z" if i % (len(a) // edits) == 7 else char for i, char in enumerate(a))
    distance = sum(x != y for x, y in zip(a, near))
    assert levenshtein(a, near, cutoff=len(a) // 2) == distance
    assert anls(near, (a,), "official") == pytest.approx(1 - distance / len(a))
    assert infovqa.agree(a, near, sample)  # type: ignore[arg-type]


_OLD_NUMBER_PATTERNS = (re.compile(r"-?\b\d{1,3}(?:,\d{3})+\b"), re.compile(r"-?\d+(?:\.\d+)?[eE][+-]?\d+"),
                        re.compile(r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])"))
NUMBERY = st.text(st.sampled_from(list("0123456789119.,eE-+ ax_٣")), max_size=24)


@EQUIVALENCE
@given(text=NUMBERY)
def test_mmmu_number_patterns_find_what_mmmus_patterns_find(text: str) -> None:
    for new, old in zip(_NUMBER_PATTERNS, _OLD_NUMBER_PATTERNS, strict=True):
        assert new.findall(text) == old.findall(text)
