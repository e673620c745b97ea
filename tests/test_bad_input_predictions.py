"""`mai score` input that is not what it should be: bytes that are not UTF-8, text that is not JSON (or JSON
Python cannot hold), hostile field values. Each such line becomes that line's error; the good lines around it
are scored; nothing raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.evals.registry import get_benchmark
from mai.scoring import read_prediction_lines, split_jsonl

# a correct prediction for one good row of each of the paper's six benchmarks
GOOD: dict[str, dict[str, Any]] = {
    "pope": {"question_id": 1, "question": "Is there a dog?", "answer": "yes", "category": "random",
             "prediction": "[[yes]]"},
    "mmbench": {"index": 5, "question": "What color?", "hint": None, "A": "red", "B": "green", "C": "blue",
                "answer": "B", "category": "c", "prediction": "[[B]]"},
    "mmmu": {"id": "validation_Math_1", "question": "Which?", "options": "['1.5', 'two']", "answer": "B",
             "question_type": "multiple-choice", "prediction": "[[B]]"},
    "chartqa": {"type": "human_test", "question": "How much?", "answer": "45", "prediction": "[[45]]"},
    "realworldqa": {"question": "Which way?\nA. left\nB. right", "answer": "B", "prediction": "[[B]]"},
    "infovqa": {"questionId": 7, "question": "Where?", "answers": ["north america"], "answer_type": "span",
                "prediction": "[[North America]]"},
}


def jsonl_bytes(name: str) -> bytes:
    good = json.dumps(GOOD[name]).encode()
    latin1 = json.dumps({**GOOD[name], "prediction": "[[é]]"}, ensure_ascii=False).encode("latin-1")
    truncated = b'{"prediction": "\xc3"}'  # the first byte of a two-byte character, then the quote
    return b"\n".join([good, latin1, b"\xff\xfe\x00{", truncated, good])


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_file_that_is_not_utf8_scores_its_good_lines(name: str, tmp_path: Path) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(jsonl_bytes(name) + b"\n")
    lines = read_prediction_lines(get_benchmark(name), split_jsonl(path.read_bytes()))
    assert [line.line for line in lines] == [1, 2, 3, 4, 5]
    assert [line.sample is not None for line in lines] == [True, False, False, False, True]
    assert lines[1].error == "line is not valid UTF-8 (byte 0xe9 at offset " + str(
        json.dumps({**GOOD[name], "prediction": "[[é]]"}, ensure_ascii=False).index("é")) + ")"
    assert "not valid UTF-8 (byte 0xff at offset 0)" in (lines[2].error or "")
    report = api.score(name, split_jsonl(path.read_bytes()))
    assert report.summary["scored"] == 2 and [e["line"] for e in report.summary["errors"]] == [2, 3, 4]
    headline = report.summary["metrics"][0]
    assert headline["value"] == 1.0, headline


def test_jsonl_lines_end_at_newlines_only() -> None:
    # a JSON string may hold U+2028 or a form feed unescaped; str.splitlines would cut the line there
    row = json.dumps({**GOOD["chartqa"], "question": "How\u2028much\x0c?"}, ensure_ascii=False).encode()
    data = b"\xef\xbb\xbf" + row + b"\r\n\r\n" + row
    lines = read_prediction_lines(get_benchmark("chartqa"), split_jsonl(data))
    assert [line.sample is not None for line in lines] == [True, False, True]
    assert lines[0].sample is not None and lines[0].sample.question == "How\u2028much\x0c?"
    assert split_jsonl(b"") == [] and split_jsonl(b"a\n") == [b"a"] and split_jsonl(b"a\nb") == [b"a", b"b"]


@pytest.mark.parametrize(("line", "reason"), [
    ("[" * 100_000, "line is not usable JSON: RecursionError"),
    ('{"prediction": "x", "answer": ' + "9" * 5_000 + "}", "line is not usable JSON: ValueError"),
    ("not json", "line is not valid JSON"),
    ("", "line is not valid JSON"),
    ("[1, 2]", "line is not a JSON object"),
])
def test_lines_python_cannot_read_as_a_row_are_errors(line: str, reason: str) -> None:
    for name in GOOD:
        (read,) = read_prediction_lines(get_benchmark(name), [line])
        assert read.sample is None and (read.error or "").startswith(reason), (name, read.error)


@pytest.mark.parametrize("options", ["[" * 5_000, "(" * 5_000, "-" * 100_000 + "1", "9" * 100_000, "[1,", "{1: 2}"])
def test_mmmu_options_that_are_no_list_literal_are_errors(options: str) -> None:
    (read,) = read_prediction_lines(get_benchmark("mmmu"), [json.dumps({**GOOD["mmmu"], "options": options})])
    assert read.sample is None and "column 'options'" in (read.error or "")


def test_mai_score_reports_a_non_utf8_line_and_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line reads the file as bytes: a line that is not UTF-8 is that line's error, the exit is 0."""
    from mai.cli import main

    predictions = tmp_path / "predictions.jsonl"
    predictions.write_bytes(b'{"question": "Is there a cat?", "answer": "yes", "prediction": "\xff"}\n'
                            b'{"question": "Is there a dog?", "answer": "no", "category": "adversarial", '
                            b'"question_id": "2", "prediction": "no"}\n')
    assert main(["score", "pope", "--predictions", str(predictions)]) == 0
    out = capsys.readouterr().out
    assert "line 1: line is not valid UTF-8" in out and "1 scored" in out
