"""`mai sql` against hostile limits, values and signals: the timeout and memory limit take only finite positive
amounts, JSON output keeps every column and holds only JSON, and the table shows control characters escaped. Over
an empty store (the views exist and are empty; DuckDB answers the SELECTs), real DuckDB."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mai import api
from mai.cli import main
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


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _gone(pid: int, within_s: float) -> bool:
    """The process has ended (a zombie counts: it runs nothing, its parent has not reaped it yet)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _release_after(fifo: Path, seconds: float) -> threading.Timer:
    """Open the FIFO's writing end and close it after `seconds` (its reader then reads an empty file), if a reader
    still waits on it."""
    def release() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader any more
            pass
    timer = threading.Timer(seconds, release)
    timer.start()
    return timer


def test_the_timeout_holds_for_a_statement_that_never_checks_for_an_interrupt(tmp_path: Path) -> None:
    """DuckDB checks for an interrupt between chunks of work: a read blocked on a FIFO in the store (or one huge
    function call, `length(repeat('x', 1500000000))`: 80 s under --timeout 2) never reaches a check. Its worker
    process is killed a second after the timeout (the FIFO is released after 10 s, so without a worker the query
    would answer then)."""
    fifo = tmp_path / "store" / "pipe"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    released = _release_after(fifo, 10)
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="stopped after 0.5 s"):
            api.query(tmp_path, f"SELECT * FROM read_text('{fifo}')", timeout_s=0.5)
        assert time.monotonic() - started < 8
    finally:
        released.cancel()
    assert not multiprocessing.active_children()
    assert api.query(tmp_path, "SELECT 1", timeout_s=0.5)[1] == [(1,)]  # a short query still answers


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_stops_a_running_query_at_once(tmp_path: Path, signum: int) -> None:
    """SIGTERM ends `mai sql` and its query at once (exit status 143), not at the timeout; SIGKILL, which nothing
    can handle, ends the query too (the worker process exits when its caller's end of the lifeline closes)."""
    command = [sys.executable, "-m", "mai.cli", "--home", str(tmp_path), "sql", "--timeout", "300",
               "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _children(process.pid) and time.monotonic() < deadline:  # the worker has started
            time.sleep(0.05)
        (worker,) = _children(process.pid)
        time.sleep(0.5)  # the query is running
        process.send_signal(signum)
        _, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert _gone(worker, within_s=5)
    if signum == signal.SIGTERM:
        assert process.returncode == 143 and "stopped by signal SIGTERM" in err, err
    else:
        assert process.returncode == -signal.SIGKILL
