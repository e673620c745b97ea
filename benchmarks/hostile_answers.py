"""Every benchmark's parse / score / agree on a megabyte of hostile text: the slowest single call, in CPU seconds
(CPU, not wall time: the machine's cores are shared). Goal: under 0.1 s per call (issue 30).

    .venv/bin/python benchmarks/hostile_answers.py [--repeats 3]

Each text is given as a model's output to every sample kind the benchmark has (multiple choice, open, yes/no,
numeric ...), under every scorer profile: `parse_answer`, then `score` of what it parsed, then `agree` of that
with the text less its last character. Then pairs of different megabyte texts (two answers of random words, of random
letters, a text and its reverse, ...): `agree` of the two texts and of what each parses to, and `score` of one
against the other as the sample's reference. Prints a Markdown table (docs/benchmarks.md, "Chaos").
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from mai.evals.registry import BENCHMARKS, get_benchmark
from mai.scoring import read_prediction_lines
from mai.types import Sample

MEGABYTE = {
    "[[ flood": "[[" * 500_000, "]] flood": "]]" * 500_000, "[[x flood": "[[x" * 300_000,
    "digits": "1" * 1_000_000, "digits %": "9" * 999_999 + "%", "1, flood": "1," * 500_000,
    "numbered lines": "is 1\n" * 200_000, "distinct numbers": "is 12345\n" * 100_000, "1. flood": "1." * 500_000,
    "1e flood": "1e" * 500_000, "1,000, flood": "1,000," * 166_666, "long decimal": "0." + "1" * 999_998,
    "huge exponent": "1" * 999_999 + "e5", "#½": "#" + "½" * 500_000, "Answer: A": "Answer: A " * 100_000,
    "lone surrogates": "\ud800" * 1_000_000, "so flood": "so " * 333_333, "é": "é" * 1_000_000,
}
_RANDOM = random.Random(30)
_WORDS = ["north", "america", "revenue", "2019", "the", "chart", "shows", "of", "in", "percent", "[[", "]]", "1,000"]


def _words(n: int) -> str:
    return " ".join(_RANDOM.choice(_WORDS) for _ in range(n // 4))[:n]


def _letters(n: int, alphabet: str) -> str:
    return "".join(_RANDOM.choice(alphabet) for _ in range(n))


_PROSE = _words(900_000)
# pairs of different megabyte answers: the edit distance between two such is quadratic (~10 s in full)
DIFFERENT = {
    "two texts of random words": (_PROSE, _words(900_000)),
    "two texts of random letters": (_letters(1_000_000, "abcd "), _letters(1_000_000, "abcd ")),
    "a text and its reverse": (_PROSE, _PROSE[::-1]),
    "a text and its shift by one word": (_PROSE, _PROSE[6:] + _PROSE[:6]),
    "a text and 1,000 edits of it": (_PROSE, "".join("Z" if i % 900 == 3 else c for i, c in enumerate(_PROSE))),
    "digits and letters": ("1" * 1_000_000, _letters(1_000_000, "ab")),
}
# one row per kind of sample each benchmark has, in the hub's schema
ROWS: dict[str, list[dict[str, object]]] = {
    "demo": [{"index": 1, "question": "Is there a red circle?", "answer": "yes", "category": "presence"},
             {"index": 2, "question": "What color?", "A": "red", "B": "green", "C": "blue", "D": "yellow",
              "answer": "B", "category": "attribute"}],
    "shapes": [{"index": 1, "question": "Is there a red circle?", "answer": "yes", "category": "presence"},
               {"index": 2, "question": "How many?", "answer": "3", "category": "counting"}],
    "pope": [{"question_id": 1, "question": "Is there a dog?", "answer": "yes", "category": "random"}],
    "mmbench": [{"index": 5, "question": "What color?", "hint": "nan", "A": "red", "B": "green", "C": "blue",
                 "D": None, "answer": "B", "category": "c"}],
    "mmmu": [{"id": "validation_Math_1", "question": "What?", "options": "['1.5', 'two', 'x', 'blue car']",
              "answer": "B", "question_type": "multiple-choice"},
             {"id": "validation_Art_2", "question": "How much?", "options": "[]", "answer": "12.5",
              "question_type": "open"}],
    "chartqa": [{"type": "human_test", "question": "How much?", "answer": "45"},
                {"type": "augmented_test", "question": "Which?", "answer": "Asia"}],
    "realworldqa": [{"question": "Which way?\nA. left\nB. right", "answer": "B"},
                    {"question": "How many cars?", "answer": "3"}],
    "infovqa": [{"questionId": 7, "question": "What?", "answers": ["north america", "N. America"],
                 "answer_type": "span"}],
}


def samples(name: str) -> list[Sample]:
    lines = read_prediction_lines(get_benchmark(name), [json.dumps({**row, "prediction": ""}) for row in ROWS[name]])
    return [line.sample for line in lines if line.sample is not None]


def cpu(call: Callable[[], object]) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


def slowest(name: str, repeats: int) -> tuple[float, str]:
    """The slowest single call over every text, sample and profile (the least of `repeats` tries of each)."""
    benchmark = get_benchmark(name)
    worst, where = 0.0, ""
    for label, text in MEGABYTE.items():
        for sample in samples(name):
            for profile in benchmark.profiles:
                parsed = benchmark.parse_answer(text, sample, profile)
                calls = {"parse": partial(benchmark.parse_answer, text, sample, profile),
                         "score": partial(benchmark.score, parsed, sample, profile),
                         "agree": partial(benchmark.agree, parsed, text[:-1], sample)}
                for kind, call in calls.items():
                    seconds = min(cpu(call) for _ in range(repeats))
                    if seconds > worst:
                        worst, where = seconds, f"{label} ({kind})"
    for label, (a, b) in DIFFERENT.items():
        for sample in samples(name):
            for profile in benchmark.profiles:
                parsed_a, parsed_b = benchmark.parse_answer(a, sample, profile), benchmark.parse_answer(b, sample, profile)
                against_b = replace(sample, answer=b, references=(b,))
                calls = {"agree": partial(benchmark.agree, a, b, sample),
                         "agree parsed": partial(benchmark.agree, parsed_a, parsed_b, sample),
                         "score": partial(benchmark.score, a, against_b, profile)}
                for kind, call in calls.items():
                    seconds = min(cpu(call) for _ in range(repeats))
                    if seconds > worst:
                        worst, where = seconds, f"{label} ({kind})"
    return worst, where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="tries per call; the least CPU time counts")
    args = parser.parse_args()
    print("| benchmark | slowest call (CPU s) | on |\n|---|---|---|")
    results = {name: slowest(name, args.repeats) for name in sorted(BENCHMARKS)}
    for name, (seconds, where) in results.items():
        print(f"| {name} | {seconds:.3f} | {where} |")
    worst = max(seconds for seconds, _ in results.values())
    print(f"\nslowest of all: {worst:.3f} s ({'goal met' if worst < 0.1 else 'over the 0.1 s goal'})")
    return 0 if worst < 0.1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
