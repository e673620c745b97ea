"""Scorers are total and exact on hostile answers: text that looks like MMMU's internal number marks (`#½`), numbers
past the float range (two equal 400-digit numbers are equal, two different ones are not), a megabyte of text in a
single call bounded (about 0.06 s of CPU measured, 0.25 s asserted: the 0.8 s regression it guards against stays
caught, two test workers' contention on two cores does not fail it), and labels outside a benchmark's set rejected
when the row is read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal, localcontext
from functools import partial
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mai.evals.base import BadRow
from mai.evals.demo import DemoBenchmark
from mai.evals.mmmu import MAX_OPEN_ANSWER_CHARS, eval_open, parse_open_response
from mai.evals.registry import BENCHMARKS, get_benchmark
from mai.scoring import read_prediction_lines
from mai.types import Sample
from tests.test_fuzz_scoring import EVERY_CHARACTER, exercise, samples

T = TypeVar("T")

PROPERTY = settings(max_examples=60, deadline=timedelta(seconds=2), database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# long digit strings: a float holds anything past ~309 digits only as infinity
HUGE = st.builds(lambda first, rest, fraction: first + rest + fraction, st.sampled_from("123456789"),
                 st.text("0123456789", min_size=320, max_size=2_000),
                 st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=4).map(lambda d: "." + d)))


def numeric_sample(name: str, answer: str) -> Sample:
    """A sample whose reference is `answer` (a number), read through the benchmark's own row parser."""
    row = {"chartqa": {"type": "human_test", "question": "How much?", "answer": answer},
           "shapes": {"index": 1, "question": "How many?", "answer": answer, "category": "counting"},
           "mmmu": {"id": "validation_Math_1", "question": "How much?", "options": "[]", "answer": answer,
                    "question_type": "open"}}[name]
    lines = read_prediction_lines(get_benchmark(name), [json.dumps({**row, "prediction": ""})])
    assert lines[0].sample is not None, lines[0].error
    return lines[0].sample


@PROPERTY
@given(text=st.text(EVERY_CHARACTER, max_size=40))
def test_mmmu_text_that_starts_like_a_marked_number_is_text(text: str) -> None:
    for response in ("#" + text, "#½", "the answer is #" + text, "\x1f#" + text):
        candidates = parse_open_response(response)
        assert isinstance(eval_open("12", candidates), bool)
        assert isinstance(eval_open("#" + text, candidates), bool)
        exercise("mmmu", response, "#½")


def test_mmmu_open_answer_half_sign_scores_zero_instead_of_raising() -> None:
    assert eval_open("12", parse_open_response("#½")) is False
    assert eval_open("½", parse_open_response("It is ½")) is True  # text gold contained in the answer


@pytest.mark.parametrize("name", ["chartqa", "shapes", "mmmu"])
@PROPERTY
@given(number=HUGE, other=HUGE)
def test_numbers_past_the_float_range_compare_exactly(name: str, number: str, other: str) -> None:
    if name == "shapes":
        number, other = number.split(".")[0], other.split(".")[0]  # counts are whole numbers
    benchmark = get_benchmark(name)
    sample = numeric_sample(name, number)
    same = benchmark.parse_answer(number, sample)
    assert benchmark.score(same, sample) == 1.0
    assert benchmark.agree(same, benchmark.parse_answer(number, sample), sample)
    differs = other[:-1] + str((int(other[-1]) + 5) % 10) if other == number else other
    assert benchmark.score(benchmark.parse_answer(differs, sample), sample) == 0.0 or _within_five_percent(differs,
                                                                                                          number)


def _within_five_percent(a: str, b: str) -> bool:
    with localcontext() as context:
        context.prec = 60
        return abs(Decimal(a) - Decimal(b)) <= abs(Decimal(b)) * Decimal("0.05")


@pytest.mark.parametrize("name", ["chartqa", "shapes"])
def test_two_identical_60_and_400_digit_numbers_are_equal_and_neighbours_are_not(name: str) -> None:
    benchmark = get_benchmark(name)
    for digits in (60, 400, 5_000):
        number = "7" * digits
        sample = numeric_sample(name, number)
        assert benchmark.score(number, sample) == 1.0, digits
        assert benchmark.agree(number, number, sample)
        assert benchmark.score("8" + "7" * (digits - 1), sample) == 0.0, digits  # 14 % apart
    sample = numeric_sample(name, "1" + "0" * 400)
    assert benchmark.score("104" + "0" * 398, sample) == 1.0  # 4 % apart: within the 5 % tolerance
    assert benchmark.score("106" + "0" * 398, sample) == 0.0


def test_mmmu_two_different_400_digit_numbers_are_different() -> None:
    assert eval_open("1" * 400, parse_open_response("2" * 400)) is False
    assert eval_open("1" * 400, parse_open_response("the answer is " + "1" * 400)) is True
    assert eval_open("1" * 400 + ".004", parse_open_response("1" * 400)) is True  # rounded to 2 decimals
    assert eval_open("0", parse_open_response("-0.001")) is True  # rounds to -0.0, which equals 0


MEGABYTE = ["[[" * 500_000, "]]" * 500_000, "[[x" * 300_000, "1" * 1_000_000, "9" * 999_999 + "%", "1," * 500_000,
            "1 " * 500_000, "#" + "½" * 500_000, "Answer: A " * 100_000, "\ud800" * 1_000_000, "so " * 333_333, "é" * 1_000_000,
            # a line per number: MMMU made a candidate of each (0.8 s before its parse read only the answer's end);
            # more digit floods are timed by benchmarks/hostile_answers.py
            "is 1\n" * 200_000, "is 12345\n" * 100_000]


# measured: at most ~0.06 s of CPU per call on these texts (MMMU's open answers read only their last
# MAX_OPEN_ANSWER_CHARS characters; mai/evals/mmmu.py). The bound is 4x that: under two pytest workers on two cores a
# best-of-three mmbench call once took 0.102 s of CPU, while the regression guarded against took 0.8 s.
CALL_BOUND_S = 0.25


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_single_call_on_a_megabyte_takes_under_a_quarter_second(name: str) -> None:
    benchmark = get_benchmark(name)
    slowest = 0.0
    for text in MEGABYTE:
        for sample in samples(name):
            agreed: set[str | None] = set()  # `agree` reads no profile: each answer's call is timed once
            for profile in benchmark.profiles:
                parsed, elapsed = timed(partial(benchmark.parse_answer, text, sample, profile))
                slowest = max(slowest, elapsed, timed(partial(benchmark.score, parsed, sample, profile))[1])
                if parsed not in agreed:
                    agreed.add(parsed)
                    slowest = max(slowest, timed(partial(benchmark.agree, parsed, text[:-1], sample))[1])
                assert parsed is None or isinstance(parsed, str)
    assert slowest < CALL_BOUND_S, f"{name}: slowest call {slowest:.3f} s"


def test_mmmu_reads_only_the_end_of_an_open_answer() -> None:
    """The parse's work is bounded: what lies before the last MAX_OPEN_ANSWER_CHARS characters is never read (a
    megabyte of numbered lines made ~200,000 candidates), while every answer up to that length is read whole."""
    tail = "\nthe answer is 8"
    long = "the answer is 7\n" + "more " * (MAX_OPEN_ANSWER_CHARS // 5) + tail
    assert parse_open_response(long) == parse_open_response(long[-MAX_OPEN_ANSWER_CHARS:])
    assert eval_open("8", parse_open_response(long)) is True
    assert eval_open("7", parse_open_response(long)) is False  # before the end: not read
    fits = "the answer is 7\n" + "x" * (MAX_OPEN_ANSWER_CHARS - 40) + tail
    assert len(fits) <= MAX_OPEN_ANSWER_CHARS and eval_open("7", parse_open_response(fits)) is True
    lines = "".join(f"is {n}\n" for n in range(200_000))
    assert len(parse_open_response(lines)) < 2 * MAX_OPEN_ANSWER_CHARS // 5  # one line per ~5 characters read


def timed(call: Callable[[], T], bound_s: float = CALL_BOUND_S) -> tuple[T, float]:
    """The result and the CPU time it took: CPU time, not wall time, because the two cores are shared with other
    work (under a load of 6, wall time doubles). A call over `bound_s` (the bound the test asserts) is timed twice
    more and its best time counts: a collection of the megabyte strings' garbage or a cache miss only adds to a call
    (a chartqa call took 0.107 s in one fast-tier run and under 0.1 s in every other), so the best of three is the
    cost of the call itself. A call under the bound is not timed again: its first time already passes, and the
    retries of every call over 0.05 s were a quarter of the test's time."""
    started = time.process_time()
    result = call()
    elapsed = time.process_time() - started
    for _ in range(2 if elapsed > bound_s else 0):
        started = time.process_time()
        call()
        elapsed = min(elapsed, time.process_time() - started)
    return result, elapsed


@pytest.mark.parametrize("answer", ["maybe", "Yes please", "1"])
def test_a_yes_no_row_with_an_answer_outside_yes_no_is_a_bad_row(answer: str) -> None:
    row = {"index": 1, "question": "Is there a red circle?", "answer": answer, "category": "presence"}
    with pytest.raises(BadRow, match="yes or no"):
        DemoBenchmark().parse_row(row, 0, with_images=False)
    lines = read_prediction_lines(DemoBenchmark(), [json.dumps({**row, "prediction": "yes"})])
    assert lines[0].sample is None and "yes or no" in (lines[0].error or "")
