"""The fixed cost of `mai` commands, from process start to exit (results in docs/benchmarks.md, "Startup").

Each command runs as a user runs it, in a fresh process (`python -m mai.flows.cli ...`, no PREFECT_API_URL: the
CLI's own temporary Prefect server), `--repeats` times; the table reports the median and the spread:

  cached demo re-run     `mai demo` when every generation is stored (goal <= 1.5 s)
  mai sql "SELECT 1"     (goal <= 0.5 s)
  mai report             the demo store's report
  run --limit 20         the shapes pair on 20 items: first (computes; a fresh store each time) and cached

Each command is measured twice: with no Prefect server running (every command that runs flows starts a temporary
one) and with a persistent local server (`mai server start`, started for the measurement and stopped after).

Run: `.venv/bin/python benchmarks/startup.py [--repeats 5] [--home DIR]`. The first demo run fills the store and
is not timed. Measure on a quiet machine: the numbers are seconds of a 2-core machine's wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

GOALS_S = {"cached demo re-run": 1.5, 'mai sql "SELECT 1"': 0.5}
SHAPES_20 = ["run", "--benchmark", "shapes", "--small-model", "mai-shapes-small", "--large-model", "mai-shapes-large",
             "--limit", "20"]


@dataclass(frozen=True)
class Timing:
    server: str          # "temporary" or "local"
    command: str
    median_s: float
    min_s: float
    max_s: float
    repeats: int
    goal_s: float | None


def mai(home: Path, *args: str) -> float:
    """Seconds from process start to exit of one `mai` command; raises if it fails."""
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(HF_HUB_OFFLINE="1", PREFECT_LOGGING_LEVEL="WARNING")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mai.flows.cli", "--home", str(home), *args], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"mai {' '.join(args)} failed: {done.stderr[-2000:]}")
    return seconds


def timed(server: str, command: str, repeats: int, call: Callable[[], float]) -> Timing:
    seconds = [call() for _ in range(repeats)]
    return Timing(server, command, round(statistics.median(seconds), 2), round(min(seconds), 2),
                  round(max(seconds), 2), repeats, GOALS_S.get(command))


def measure(home: Path, scratch: Path, repeats: int, server: str) -> list[Timing]:
    fresh = iter(range(repeats))
    return [
        timed(server, "cached demo re-run", repeats, lambda: mai(home, "demo")),
        timed(server, 'mai sql "SELECT 1"', repeats, lambda: mai(home, "sql", "SELECT 1")),
        timed(server, "mai report (demo store)", repeats, lambda: mai(home, "report", "--all", "--out",
                                                                      str(scratch / "report.html"))),
        timed(server, "run --limit 20, first", repeats,
              lambda: mai(scratch / f"fresh-{server}-{next(fresh)}", *SHAPES_20)),
        timed(server, "run --limit 20, cached", repeats, lambda: mai(home, *SHAPES_20)),
    ]


def markdown(timings: list[Timing]) -> str:
    lines = ["| Prefect server | command | median s | min s | max s | goal s |", "|---|---|---|---|---|---|"]
    lines += [f"| {t.server} | {t.command} | {t.median_s} | {t.min_s} | {t.max_s} | {t.goal_s or '-'} |"
              for t in timings]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="store root (default: a fresh temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mai-startup-") as scratch:
        home = args.home or Path(scratch) / "store"
        os.environ["MAI_PREFECT_SERVER_DIR"] = str(Path(scratch) / "prefect-server")  # this measurement's own
        mai(home, "demo")  # fills the store
        timings = measure(home, Path(scratch), args.repeats, "temporary")
        mai(home, "server", "start")
        try:
            timings += measure(home, Path(scratch), args.repeats, "local")
        finally:
            mai(home, "server", "stop")
    print(json.dumps([asdict(t) for t in timings], indent=1))
    print(markdown(timings))


if __name__ == "__main__":
    main()
