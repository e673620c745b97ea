"""A lost worker in a real fan-out, found by the zombie automation that mai creates (results in docs/benchmarks.md,
"Lost workers").

The set-up is a self-hosted server as a team keeps one: `prefect server start` (every service, the triggers service
that evaluates proactive automations included) on a SQLite database of its own, a process work pool with prefect.yaml's
drain deployment, and two process workers. Nothing else is set up: `mai run --workers 2` creates the automation (drain
and shard runs without a heartbeat for 90 s end Crashed, flows/fanout.py `ensure_zombie_automation`) and gives its
drains a 30 s heartbeat. Once a drain runs a shard and has stored some of it, its worker and the drain's process are
SIGKILLed together (what a lost host looks like from the server: nothing more arrives). The script prints, per
repeat, the seconds from the kill to the run's completion (the other drain takes the lost shard over, its lease being
free at once) and to the lost drain's and shard's Crashed states, then the medians.

Run: `.venv/bin/python benchmarks/zombie_flows.py [--repeats 3]` (about 3 minutes per repeat on the 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
POOL, DEPLOYMENT = "mai-zombie", "mai-drain/drain"
RUN = ["--limit", "24", "--shards", "2", "--batch-size", "4", "--max-new-tokens", "R=160", "--workers", "2"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="give up on one repeat after this many seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mai-zombie-") as scratch:
        env = _env(Path(scratch))
        os.environ["PREFECT_API_URL"] = env["PREFECT_API_URL"]  # this process's client too, before Prefect loads
        server = _start("server", [sys.executable, "-m", "prefect", "server", "start", "--no-ui"], env, Path(scratch))
        workers: dict[str, subprocess.Popen[bytes]] = {}
        try:
            _wait_for_server(env["PREFECT_API_URL"], server)
            _deploy(env, Path(scratch))
            assets = _assets(Path(scratch) / "assets")
            figures = [_one_lost_worker(env, Path(scratch), assets, workers, index, args.timeout)
                       for index in range(1, args.repeats + 1)]
        finally:
            for process in [*workers.values(), server]:
                _stop(process)
    for index, (completed, crashed) in enumerate(figures, 1):
        print(f"repeat {index}: run completed {completed:.1f} s after SIGKILL, drain and shard runs Crashed after "
              f"{crashed:.1f} s")
    print(f"median: completed {statistics.median(f[0] for f in figures):.1f} s, Crashed "
          f"{statistics.median(f[1] for f in figures):.1f} s after SIGKILL")
    return 0


def _env(scratch: Path) -> dict[str, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {**os.environ, "PREFECT_HOME": str(scratch / "prefect-home"), "PREFECT_UI_ENABLED": "0",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{scratch / 'prefect.db'}",
            "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_WORKER_QUERY_SECONDS": "2", "HF_HUB_OFFLINE": "1"}


def _start(name: str, command: list[str], env: dict[str, str], scratch: Path) -> subprocess.Popen[bytes]:
    log = (scratch / f"{name}.log").open("wb")
    return subprocess.Popen(command, env=env, cwd=scratch, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _wait_for_server(url: str, server: subprocess.Popen[bytes]) -> None:
    from mai.flows.prefect_api import healthy

    deadline = time.monotonic() + 300
    while not healthy(url):
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"prefect server start did not answer (exit status {server.poll()})")
        time.sleep(0.5)


def _deploy(env: dict[str, str], scratch: Path) -> None:
    """prefect.yaml's drain deployment, on a process pool of its own."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    spec["deployments"] = [{**d, "work_pool": {"name": POOL, "work_queue_name": "default"}}
                           for d in spec["deployments"] if d["name"] == "drain"]
    spec.pop("definitions", None)
    (scratch / "prefect-zombie.yaml").write_text(yaml.safe_dump(spec))
    for command in (["work-pool", "create", POOL, "--type", "process"],
                    ["deploy", "--all", "--prefect-file", str(scratch / "prefect-zombie.yaml")]):
        subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", *command], cwd=REPO, env=env, check=True,
                       capture_output=True)


def _assets(root: Path) -> Path:
    """A store root with the built-in tiny models and the demo dataset (copied into each repeat's store)."""
    from mai.run.assets import build_demo_dataset, build_models
    from mai.storage.paths import Home

    home = Home.at(root)
    build_models(home)
    build_demo_dataset(home)
    return root


def _one_lost_worker(env: dict[str, str], scratch: Path, assets: Path, workers: dict[str, subprocess.Popen[bytes]],
                     index: int, timeout_s: float) -> tuple[float, float]:
    """A fanned-out run, one of whose workers dies with its drain mid-shard: (seconds from the kill to the run's
    completion, to the last of the lost drain's and shard's Crashed states)."""
    store = scratch / f"store-{index}"
    for folder in ("models", "datasets"):
        shutil.copytree(assets / folder, store / folder)
    for name in ("worker-a", "worker-b"):
        if name not in workers or workers[name].poll() is not None:
            workers[name] = _start(name, [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL,
                                          "--limit", "1", "--name", name], {**env, "MAI_HOME": str(store)}, scratch)
    run = subprocess.Popen([sys.executable, "-m", "mai.cli", "--home", str(store), "run", *RUN, "--name",
                            f"zombie-{index}"], cwd=REPO, env={**env, "MAI_DRAIN_DEPLOYMENT": DEPLOYMENT},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    killed_wall, killed = _kill_a_worker_mid_shard(store, workers, run, deadline)
    _, err = run.communicate(timeout=max(deadline - time.monotonic(), 1))
    if run.returncode != 0:
        raise SystemExit(f"the run failed: {err.decode()[-2000:]}")
    completed = time.monotonic() - killed
    crashed = _until_crashed(f"zombie-{index}", deadline)
    return completed, (crashed - killed_wall).total_seconds()


def _kill_a_worker_mid_shard(store: Path, workers: dict[str, subprocess.Popen[bytes]], run: subprocess.Popen[bytes],
                             deadline: float) -> tuple[datetime, float]:
    """SIGKILL to a worker (its process group) and to the drain it runs, once that drain holds a shard's lease and
    some R outputs are stored (inside a shard); when it happened, as a wall time and on the monotonic clock."""
    from mai.storage.claims import lease_holder, lease_is_held
    from mai.storage.paths import Home

    home, by_pid = Home.at(store), {process.pid: process for process in workers.values()}
    while time.monotonic() < deadline and run.poll() is None:
        for lease in home.runs.glob("*/shards/*.lease"):
            holder = lease_holder(lease)
            worker = by_pid.get(int(str(holder.get("ppid", 0)) or 0))
            if worker is not None and lease_is_held(lease) and list(home.generations.glob("*/R/*.parquet")):
                os.killpg(worker.pid, signal.SIGKILL)
                os.kill(int(str(holder["pid"])), signal.SIGKILL)
                worker.wait()
                return datetime.now(UTC), time.monotonic()
        time.sleep(0.2)
    raise SystemExit("no shard was caught running on a worker")


def _until_crashed(run_name: str, deadline: float) -> datetime:
    """When the last of the run's Crashed drain and shard runs (one of each) reached Crashed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    from mai.flows.fanout import ZOMBIE_AUTOMATION

    with get_client(sync_client=True) as client:
        [parent] = [r for r in client.read_flow_runs() if r.name == f"mai-run/{run_name}"]
        tagged = FlowRunFilter(tags=FlowRunFilterTags(all_=[t for t in parent.tags if t.startswith("mai-run:")]))
        while time.monotonic() < deadline:
            crashed = [r for r in client.read_flow_runs(flow_run_filter=tagged) if r.state and r.state.is_crashed()]
            if {r.name.split("-")[0] for r in crashed} == {"drain", "shard"}:
                assert client.read_automations_by_name(ZOMBIE_AUTOMATION), "mai created no automation"
                return max(r.state.timestamp for r in crashed if r.state is not None)
            time.sleep(1.0)
    raise SystemExit("the lost drain and shard runs were not Crashed in time")


if __name__ == "__main__":
    sys.exit(main())
