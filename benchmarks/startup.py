"""The fixed cost of `mai` commands, from process start to exit (results in docs/benchmarks.md, "Startup"): issue
33's acceptance list.

Each command runs as a user runs it, in a fresh process (`python -m mai.cli ...`), `--repeats` times; the
table reports the median and the spread:

  cached demo re-run       `mai demo` when every generation is stored                     goal <= 1.5 s
  cached demo slice        `mai demo --limit N` after `mai demo`: a slice never run before, every output
                           stored (its samples read from the demo's, mai/pipeline.py)     goal <= 1.5 s
  mai sql "SELECT 1"                                                                      goal <= 0.5 s
  mai report               the demo store's report
  run --limit 20           the shapes pair on 20 items: first (computes; a fresh store each time) and cached
  480-sample cascade       the shapes pair over the whole test split on a fresh store: the flow's wall time
                           over its engines' generate time (as issue 33 measured 1.89x)   goal <= 1.25x
  cached run, N shards     N = 2, 8, 32, every output stored: the process's wall, and the cost of one more
                           cached shard, (t32 - t2) / 30                                  goal <= 0.05 s

under two Prefect APIs: `none` (PREFECT_API_URL unset and no server running: a run with nothing to compute is a
store lookup that starts no server, mai/pipeline.py; a command that computes starts its own temporary server,
which dies with it) and `configured` (Prefect's own `prefect server start --background`, named in PREFECT_API_URL,
as a user keeps one or a team's server would be). A `minimal Prefect flow` row (a flow that returns its argument,
against the configured server) is the floor of any command that runs a flow. `first demo` is `mai demo` on a fresh
store (one run, not repeated): the process's wall and the run's own `wall_s` from its manifest. The `--workers 1`
dispatch overhead is measured by benchmarks/fanout.py (it needs a worker and the drain deployment).

Run: `.venv/bin/python benchmarks/startup.py [--repeats 5] [--home DIR] [--skip-first-runs | --goals-only]`. The
first demo run fills the store and is not timed. `--goals-only` measures just the two start-up goals (the cached demo
re-run and `mai sql`) under both APIs, on the store at `--home`, which a `mai demo` filled before (a few minutes
instead of a quarter of an hour, and no first demo). Measure on a quiet machine: the numbers are seconds of a 2-core machine's wall
clock, and another process's load lengthens every row.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

GOALS_S = {"cached demo re-run": 1.5, "cached demo slice": 1.5, 'mai sql "SELECT 1"': 0.5, "one more cached shard": 0.05,
           "480-sample cascade: flow wall / engine": 1.25}
SHAPES = ["run", "--benchmark", "shapes", "--small-model", "mai-shapes-small", "--large-model", "mai-shapes-large"]
SHAPES_20 = [*SHAPES, "--limit", "20"]
SHARDS = (2, 8, 32)
NEW_SLICES = itertools.count(8)  # `mai demo --limit N`: each timed call a slice no command ran before
MINIMAL_FLOW = """
from prefect import flow
@flow(persist_result=False)
def minimal(x: int) -> int:
    return x
minimal(1)
"""

@dataclass(frozen=True)
class Timing:
    server: str          # "none" or "configured"
    command: str
    median_s: float      # seconds (a ratio for the cascade's row)
    min_s: float
    max_s: float
    repeats: int
    goal_s: float | None
    cpu_s: float | None  # median CPU seconds (user + system) of the command's processes: what load does not inflate


CPU_S: list[float] = []  # the CPU seconds of each command measured, in order (`timed` takes its share)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Mai:
    """Runs `mai` commands in fresh processes against one Prefect API."""

    def __init__(self, server: str, url: str | None) -> None:
        self.server = server
        self.env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
        self.env.update(HF_HUB_OFFLINE="1", PREFECT_LOGGING_LEVEL="WARNING")
        if url:
            self.env["PREFECT_API_URL"] = url

    def run(self, home: Path, *args: str) -> tuple[float, str]:
        """Seconds from process start to exit of one `mai` command, and its stdout; raises if it fails."""
        started, cpu = time.perf_counter(), children_cpu_s()
        done = subprocess.run([sys.executable, "-m", "mai.cli", "--home", str(home), *args], env=self.env,
                              capture_output=True, text=True, timeout=1800, check=False)
        seconds = time.perf_counter() - started
        CPU_S.append(children_cpu_s() - cpu)
        if done.returncode != 0:
            raise RuntimeError(f"mai {' '.join(args)} failed: {done.stderr[-2000:]}")
        return seconds, done.stdout

    def seconds(self, home: Path, *args: str) -> float:
        return self.run(home, *args)[0]

    def python(self, code: str, *args: str) -> float:
        started, cpu = time.perf_counter(), children_cpu_s()
        subprocess.run([sys.executable, "-c", code, *args], env=self.env, capture_output=True, timeout=600,
                       check=True)
        CPU_S.append(children_cpu_s() - cpu)
        return time.perf_counter() - started


def timed(server: str, command: str, repeats: int, call: Callable[[], float], goal: str | None = None) -> Timing:
    measured = len(CPU_S)
    values = [call() for _ in range(repeats)]
    cpu = CPU_S[measured:]
    return Timing(server, command, round(statistics.median(values), 3), round(min(values), 3),
                  round(max(values), 3), repeats, GOALS_S.get(goal or command),
                  round(statistics.median(cpu), 3) if len(cpu) == repeats else None)


def goals(mai: Mai, home: Path, repeats: int) -> list[Timing]:
    """The rows with a start-up goal."""
    return [timed(mai.server, "cached demo re-run", repeats, lambda: mai.seconds(home, "demo")),
            timed(mai.server, "cached demo slice", repeats,
                  lambda: mai.seconds(home, "demo", "--limit", str(next(NEW_SLICES)))),
            timed(mai.server, 'mai sql "SELECT 1"', repeats, lambda: mai.seconds(home, "sql", "SELECT 1"))]


def common(mai: Mai, home: Path, scratch: Path, repeats: int, first_runs: bool) -> list[Timing]:
    fresh = iter(range(10**6))
    rows = [
        *goals(mai, home, repeats),
        timed(mai.server, "mai report (demo store)", repeats,
              lambda: mai.seconds(home, "report", "--all", "--out", str(scratch / "report.html"))),
        timed(mai.server, "run --limit 20, cached", repeats, lambda: mai.seconds(home, *SHAPES_20)),
    ]
    if first_runs:
        rows.append(timed(mai.server, "run --limit 20, first", repeats,
                          lambda: mai.seconds(scratch / f"fresh-{mai.server}-{next(fresh)}", *SHAPES_20)))
    return rows


def cascade_ratio(mai: Mai, scratch: Path, repeats: int) -> list[Timing]:
    """The 480-sample cascade on a fresh store: flow wall over engine time (generate + load), and the process."""
    ratios, unloaded, walls = [], [], []
    for index in range(repeats):
        seconds, out = mai.run(scratch / f"cascade-{mai.server}-{index}", *SHAPES, "--json")
        timings = json.loads(out)["timings"]
        ratios.append(timings["wall_s"] / timings["engine_generate_s"])
        unloaded.append((timings["wall_s"] - timings["model_load_s"]) / timings["engine_generate_s"])
        walls.append(seconds)
    return [timed(mai.server, "480-sample cascade: flow wall / engine", repeats, iter(ratios).__next__),
            timed(mai.server, "480-sample cascade: (flow wall - model load) / engine", repeats,
                  iter(unloaded).__next__),
            timed(mai.server, "480-sample cascade: process wall s", repeats, iter(walls).__next__)]


def shard_costs(mai: Mai, home: Path, repeats: int) -> list[Timing]:
    """A cached run of the demo split at 2, 8 and 32 shards (the samples of each sharding materialised first)."""
    rows = []
    for shards in SHARDS:
        mai.seconds(home, *SHAPES, "--shards", str(shards))  # materialises this sharding; generations are stored
        rows.append(timed(mai.server, f"cached run, {shards} shards", repeats,
                          lambda n=shards: mai.seconds(home, *SHAPES, "--shards", str(n))))
    low, high = rows[0], rows[-1]
    per_shard = (high.median_s - low.median_s) / (SHARDS[-1] - SHARDS[0])
    cpu = (high.cpu_s - low.cpu_s) / (SHARDS[-1] - SHARDS[0]) if high.cpu_s and low.cpu_s else None
    rows.append(Timing(mai.server, "one more cached shard", round(per_shard, 3), round(per_shard, 3),
                       round(per_shard, 3), repeats, GOALS_S["one more cached shard"],
                       round(cpu, 3) if cpu is not None else None))
    return rows


def markdown(timings: list[Timing]) -> str:
    lines = ["| Prefect API | command | median | min | max | CPU s | goal |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {t.server} | {t.command} | {t.median_s} | {t.min_s} | {t.max_s} | {t.cpu_s or '-'} | "
              f"{t.goal_s or '-'} |" for t in timings]
    return "\n".join(lines)


def first_demo(mai: Mai, home: Path) -> list[Timing]:
    """`mai demo` on a fresh store (it fills the store the other rows read): the process, and the run inside it."""
    seconds = mai.seconds(home, "demo")
    (manifest,) = (home / "store" / "runs").glob("*/manifest.json")
    inside = float(json.loads(manifest.read_text())["timings"]["wall_s"])
    return [Timing(mai.server, "first demo (fresh store): process wall s", round(seconds, 3), round(seconds, 3),
                   round(seconds, 3), 1, None, round(CPU_S[-1], 3)),
            Timing(mai.server, "first demo (fresh store): run wall_s", round(inside, 3), round(inside, 3),
                   round(inside, 3), 1, None, None)]


def prefect_server(scratch: Path, *args: str) -> None:
    """`prefect server ...` with this measurement's own PREFECT_HOME (its database, and the pid file of
    `--background`), so that `stop` ends exactly the server `start` started."""
    env = {**os.environ, "PREFECT_HOME": str(scratch / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    subprocess.run([sys.executable, "-m", "prefect", "server", *args], env=env, capture_output=True, timeout=300,
                   check=True)


def wait_until_healthy(url: str, timeout_s: float = 300.0) -> None:
    """`prefect server start --background` returns once the server process started, before its API answers."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="store root (default: a fresh temporary one)")
    parser.add_argument("--port", type=int, default=4299, help="port of the configured server on 127.0.0.1")
    parser.add_argument("--skip-first-runs", action="store_true",
                        help="leave out the runs that compute (run --limit 20 first, the 480-sample cascade)")
    parser.add_argument("--goals-only", action="store_true",
                        help="only the cached demo re-run and mai sql, on the store at --home (a demo filled it)")
    args = parser.parse_args()
    if args.goals_only and not (args.home and (args.home / "store" / "runs").is_dir()):
        parser.error("--goals-only measures a store a `mai demo` filled: give it as --home")
    first_runs = not (args.skip_first_runs or args.goals_only)
    with tempfile.TemporaryDirectory(prefix="mai-startup-") as scratch_dir:
        scratch = Path(scratch_dir)
        home = args.home or scratch / "store"
        none = Mai("none", None)
        if args.goals_only:
            timings = goals(none, home, args.repeats)
        else:
            timings = first_demo(none, home)  # fills the store
            timings += common(none, home, scratch, args.repeats, first_runs)
            timings += shard_costs(none, home, args.repeats)
        prefect_server(scratch, "start", "--background", "--host", "127.0.0.1", "--port", str(args.port))
        try:
            configured = Mai("configured", f"http://127.0.0.1:{args.port}/api")
            wait_until_healthy(f"http://127.0.0.1:{args.port}/api")
            if args.goals_only:
                timings += goals(configured, home, args.repeats)
                return print_timings(timings)
            timings.append(timed("configured", "minimal Prefect flow", args.repeats,
                                 lambda: configured.python(MINIMAL_FLOW)))
            timings += common(configured, home, scratch, args.repeats, first_runs)
            timings += shard_costs(configured, home, args.repeats)
            if first_runs:
                timings += cascade_ratio(configured, scratch, args.repeats)
        finally:
            prefect_server(scratch, "stop")
        print_timings(timings)


def print_timings(timings: list[Timing]) -> None:
    print(json.dumps([asdict(t) for t in timings], indent=1))
    print(markdown(timings))


if __name__ == "__main__":
    main()
