"""`mai sql` against hostile limits, values and signals: the timeout and memory limit take only finite positive
amounts, JSON output keeps every column and holds only JSON, and the table shows control characters escaped. Over
an empty store (the views exist and are empty; DuckDB answers the SELECTs), real DuckDB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mai.flows import api
from mai.flows.cli import main

from mai.errors import ConfigError


@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "1e300", "0", "-1"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(
        tmp_path: Path, timeout: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "sql", "SELECT 1", f"--timeout={timeout}"]) == 2
    assert "query timeout must be a number of seconds above 0" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["-1GB", "none", "0GB", "0", "nanGB", "1e400GB", "lots"])
def test_a_memory_limit_that_is_not_a_positive_size_is_refused(tmp_path: Path, size: str) -> None:
    with pytest.raises(ConfigError, match="is not a size"):
        api.query(tmp_path, "SELECT 1", memory_limit=size)


def test_a_valid_timeout_and_memory_limit_still_answer(tmp_path: Path) -> None:
    assert api.query(tmp_path, "SELECT 42", timeout_s=5.5, memory_limit=" 1.5 GiB")[1] == [(42,)]


def test_json_keeps_repeated_columns_and_writes_nan_and_infinity_as_null(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = ("SELECT 1 AS x, 2 AS x, 3 AS x_1, 'nan'::DOUBLE AS n, 'inf'::DOUBLE AS i, '-inf'::FLOAT AS m, "
           "['nan'::DOUBLE, 0.5] AS l, {'a': 'inf'::DOUBLE} AS s")
    assert main(["--home", str(tmp_path), "sql", sql, "--format", "json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == [{"x": 1, "x_2": 2, "x_1": 3, "n": None, "i": None, "m": None, "l": [None, 0.5],
                                 "s": {"a": None}}]


def test_the_table_shows_control_characters_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = ("SELECT chr(27) || ']0;owned' || chr(7) || chr(27) || '[2J' || chr(155) || 'x' || chr(10) || 'y' "
           "|| chr(8238) || 'é' AS v, 1 AS \"a" + "\x1b" + "[31m\"")
    assert main(["--home", str(tmp_path), "sql", sql]) == 0
    out = capsys.readouterr().out
    assert not any(char in out for char in "\x1b\x07\x9b\u202e")
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x9bx\\ny\\u202eé" in out and "a\\x1b[31m" in out
    assert len(out.splitlines()) == 4  # header, rule, one row, count: the newline did not split the row
