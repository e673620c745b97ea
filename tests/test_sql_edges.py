"""`mai sql` at its edges, as the real command: its limits bound the whole command (the query, taking its result and
formatting it), Ctrl-C is one line, control characters are escaped in CSV as in the other formats, CSV lines end
with LF, and dates and timestamps print as DuckDB prints them (infinity included). Real DuckDB, an empty store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mai.cli import main

MAI = str(Path(sys.executable).with_name("mai"))


def sql(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["--home", str(home), "sql", *args]) == 0
    return capsys.readouterr().out


def timed(home: Path, *args: str, wait_s: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([MAI, "--home", str(home), "sql", *args], capture_output=True, text=True, timeout=wait_s,
                          check=False)
    return done, time.monotonic() - started


def test_csv_escapes_control_characters_and_ends_lines_with_lf(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = sql(tmp_path, capsys, "--format", "csv",
              "SELECT chr(27) || '[31mred' AS a, chr(7) AS b, 'x,' || chr(10) || 'y' AS c, 4 AS n")
    assert out == 'a,b,c,n\n\\x1b[31mred,\\x07,"x,\\ny",4\n'
    assert out.splitlines()[-1].split(",")[-1] == "4"  # what `n=$(mai sql ... --format csv | tail -1)` reads


def test_dates_and_timestamps_print_as_duckdb_prints_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    query = ("SELECT 'infinity'::TIMESTAMP AS t, '-infinity'::DATE AS d, TIMESTAMP '9999-12-31 23:59:59.999999' AS m, "
             "'infinity'::TIMESTAMPTZ AS z, 1 AS t")
    (row,) = json.loads(sql(tmp_path, capsys, "--format", "json", query))
    assert row == {"t": "infinity", "d": "-infinity", "m": "9999-12-31 23:59:59.999999", "z": "infinity", "t_1": 1}
    for ending in ("ORDER BY 1 -- x", "ORDER BY 1;", "; -- x", "/* ; */ ;;", "-- x\n;"):
        assert sql(tmp_path, capsys, "--format", "csv", f"SELECT 'infinity'::TIMESTAMP AS t {ending}") == "t\ninfinity\n"


def test_a_result_past_what_mai_sql_prints_is_refused_at_once(tmp_path: Path) -> None:
    """3 M values as JSON once took 110 s and 1.97 GB after a 30 s timeout: now one line, in seconds."""
    done, wall = timed(tmp_path, "--timeout", "30", "--format", "json", "SELECT range FROM range(3000000)")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "more than 1,000,000 values" in done.stderr, done.stderr
    assert wall < 20, wall


def test_the_timeout_covers_formatting_the_result(tmp_path: Path) -> None:
    """900 k rows as JSON take far more than 2 s to format here: the command stops at its timeout, printing no
    half result."""
    done, wall = timed(tmp_path, "--timeout", "2", "--format", "json", "SELECT range FROM range(900000)")
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert "stopped after 2 s" in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert wall < 2 + 4, wall


def worker_of(pid: int) -> bool:
    """Whether the command has started its query's worker process (a child of its own)."""
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                for c in (task / "children").read_text().split()]
    return bool(children)


def test_ctrl_c_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C reaches the terminal's process group: the command and its query's worker."""
    command = subprocess.Popen([MAI, "--home", str(tmp_path), "sql", "--timeout", "600",
                                "SELECT count(*) FROM range(1000000000000)"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not worker_of(command.pid):
            assert command.poll() is None and time.monotonic() < deadline, command.communicate()
            time.sleep(0.05)
        os.killpg(command.pid, signal.SIGINT)
        _, err = command.communicate(timeout=30)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    assert command.returncode == 128 + signal.SIGINT and "Traceback" not in err, err
    assert err == "error: interrupted (Ctrl-C)\n", err
