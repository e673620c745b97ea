"""Fan-out cost: the same MAI run (the shipped shapes pair on the shapes test split, the demo's budgets) in this
process and fanned out to 1, 2 and 4 local process workers, each run in a fresh store.

Reports per setting: the parent flow's wall time, the speed-up against 1 worker, every shard's wall time (inside
its flow, model loads included), the model loads of the run (each worker's drain loads each model once, however
many shards it runs) and two measures of what dispatching costs: the dispatch overhead = parent wall - the busiest
worker process's shard time, also as a share of the 1-worker run, and the cost against the same configuration run
in this process = wall - the in-process run's wall, as a share of the run. Goal (issue 33): the dispatch overhead
of `--workers 1` <= 10 % of the run at >= 480 samples. Shards = workers x `--shards-per-worker` (default 1). With
`--repeats N` every setting runs N times (a fresh store each) and the run with the median wall is reported, with
every wall listed.

Run: `.venv/bin/python benchmarks/fanout.py [--workers 1,2,4] [--limit N] [--shards-per-worker K] [--repeats N]`.
It starts its own Prefect server on 127.0.0.1 (a temporary PREFECT_HOME), a `mai-fanout-bench` process pool, the
drain deployment of prefect.yaml on it and the workers, and stops them all at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[1]
POOL = "mai-fanout-bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as handle:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def prefect(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", *args], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=300)


def wait_for_api(env: dict[str, str], timeout_s: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(env["PREFECT_API_URL"] + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the Prefect server did not start")


def deploy_shard(env: dict[str, str], directory: Path) -> None:
    """The deployment that fanned-out runs submit (`mai-drain/drain`), on the benchmark's pool."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    spec["deployments"] = [{**d, "work_pool": {"name": POOL, "work_queue_name": "default"}}
                           for d in spec["deployments"] if d["name"] == "drain"]
    spec.pop("definitions", None)
    path = directory / "prefect-bench.yaml"
    path.write_text(yaml.safe_dump(spec))
    prefect(env, "work-pool", "create", POOL, "--type", "process", "--overwrite")
    prefect(env, "deploy", "--all", "--prefect-file", str(path))


@dataclass(frozen=True)
class FanoutRun:
    """One run's timing with `workers` process workers (0: in the parent's process); the last two fields compare
    it with the 1-worker run once every setting has run."""

    workers: int
    shards: int
    samples: int
    wall_s: float
    shard_wall_s: list[float]
    slowest_shard_s: float
    busiest_process_s: float      # the most shard time one worker process (a drain) spent
    model_loads: int              # over the run, every process together
    model_load_s: float           # the seconds those loads took
    dispatch_overhead_s: float
    engine_generate_s: float
    generations_computed: int
    accuracy: float
    walls_s: list[float] | None = None  # every repeat's wall (the fields above are the median repeat's)
    speedup_vs_1_worker: float | None = None
    overhead_share_of_1_worker: float | None = None
    vs_in_process_s: float | None = None      # wall - the in-process run's (median) wall
    vs_in_process_share: float | None = None  # that, as a share of this run's wall


def median_run(workers: int, limit: int | None, directory: Path, shards_per_worker: int, repeats: int) -> FanoutRun:
    """`repeats` runs of one setting, each on a fresh store: the run with the median wall, listing every wall."""
    runs = sorted((one_run(workers, limit, directory / f"repeat-{index}", shards_per_worker)
                   for index in range(repeats)), key=lambda run: run.wall_s)
    return replace(runs[len(runs) // 2], walls_s=[run.wall_s for run in runs])


def one_run(workers: int, limit: int | None, directory: Path, shards_per_worker: int = 1) -> FanoutRun:
    """A fresh store, the run with `workers` (0: in this process) and max(1, workers) x shards_per_worker shards."""
    from mai import api
    from mai.config import shapes_pair_config
    from mai.storage.paths import Home
    from mai.storage.runs import read_shard_outcomes

    home = directory / f"home-{workers}"
    config = shapes_pair_config(home=str(home), limit=limit, shards=max(1, workers) * shards_per_worker,
                                workers=workers, run_name=f"fanout-{workers}")
    api.plan_run(config)  # builds the shapes splits outside the timed run
    started = time.perf_counter()
    manifest = api.run(config, progress=False)
    wall = time.perf_counter() - started
    shards = read_shard_outcomes(Home.at(home), manifest["run_id"])
    slowest = max(s.wall_s for s in shards)
    per_process: defaultdict[int, float] = defaultdict(float)  # pid -> seconds in its shards
    for shard in shards:
        per_process[shard.pid] += shard.wall_s
    busiest = max(per_process.values())
    return FanoutRun(workers=workers, shards=len(shards), samples=manifest["counts"]["valid"],
                     wall_s=round(wall, 2), shard_wall_s=[round(s.wall_s, 2) for s in shards],
                     slowest_shard_s=round(slowest, 2), busiest_process_s=round(busiest, 2),
                     model_loads=sum(len(s.loaded_models) for s in shards),
                     model_load_s=round(sum(s.tally.load_s for s in shards), 2),
                     dispatch_overhead_s=round(wall - busiest, 2),
                     engine_generate_s=round(manifest["timings"]["engine_generate_s"], 2),
                     generations_computed=manifest["counts"]["generations_computed"],
                     accuracy=next(m["value"] for m in manifest["metrics"] if m["subset"] == "overall"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--limit", type=int, default=None, help="first N test items (default: all 480)")
    parser.add_argument("--shards-per-worker", type=int, default=1, help="shards per worker (default 1)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per setting, each on a fresh store (default 1)")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    directory = Path(tempfile.mkdtemp(prefix="mai-fanout-"))
    env = {**os.environ, "PREFECT_HOME": str(directory / "prefect"), "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "0", "HF_HUB_OFFLINE": "1"}
    port = env["PREFECT_API_URL"].split(":")[2].split("/")[0]
    server = start([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", port],
                   env, directory / "server.log")
    processes = [server]
    try:
        wait_for_api(env)
        deploy_shard(env, directory)
        os.environ.update({k: env[k] for k in ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_LOGGING_LEVEL")})
        results = [median_run(0, args.limit, directory, args.shards_per_worker, args.repeats)]
        started_workers = 0
        for count in counts:
            while started_workers < count:
                started_workers += 1
                processes.append(start([sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL,
                                        "--limit", "1", "--name", f"bench-{started_workers}"], env,
                                       directory / f"worker-{started_workers}.log"))
            time.sleep(5)  # the new workers poll the pool
            results.append(median_run(count, args.limit, directory, args.shards_per_worker, args.repeats))
    finally:
        stop(processes)
    one = next(r for r in results if r.workers == 1) if 1 in counts else results[0]
    in_process = results[0]
    compared = [replace(r, speedup_vs_1_worker=round(one.wall_s / r.wall_s, 2),
                        overhead_share_of_1_worker=round(r.dispatch_overhead_s / one.wall_s, 3),
                        vs_in_process_s=round(r.wall_s - in_process.wall_s, 2),
                        vs_in_process_share=round((r.wall_s - in_process.wall_s) / r.wall_s, 3)) for r in results]
    print(json.dumps({"cpu_cores": os.cpu_count(), "results": [asdict(r) for r in compared]}, indent=2))


if __name__ == "__main__":
    main()
