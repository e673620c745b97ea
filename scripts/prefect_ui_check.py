"""The Prefect UI shows a fanned-out run under its own name, and the drain of a killed worker Crashed by the zombie
automation that the run created: a check in a real Prefect server's UI, opened in headless Chromium.

It starts a Prefect server on 127.0.0.1 (a temporary PREFECT_HOME; the server serves its UI on the same port), the
drain and shard deployments of prefect.yaml on a process pool and two process workers, then runs the demo cascade fanned out
over them (`--workers 2`) and kills one worker with its shard mid-run (a lost machine). When the run has finished
on the other worker and Prefect's zombie automation has marked the lost drain Crashed (within 90 s of its last
heartbeat), it opens the drain's flow-run page, which must show its Crashed state, and the parent's, which
must name the run `mai-run/<name>`; screenshots go to
`--shots` (docs/prefect/ in the repository). Everything it started is stopped at the end.

Run: `.venv/bin/python scripts/prefect_ui_check.py [--shots docs/prefect]` (about 5 minutes on 2 cores: the lost drain is Crashed 90 s after its last heartbeat).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # the server, pool and worker helpers of the fan-out benchmark

from fanout import POOL, deploy_shard, free_port, start, stop, wait_for_api

from mai.manifest import RunManifest

CHROMIUM = Path(os.environ.get("MAI_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_NAME = "ui-check"


def kill_a_running_shard(home: Path, worker_pids: dict[int, str], done: threading.Event) -> str | None:
    """SIGKILL the worker (its process group) and the shard flow run of the first shard caught running on it."""
    from mai.storage.claims import lease_holder, lease_is_held

    while not done.is_set():
        for lease in home.glob("store/runs/*/shards/*.lease"):
            holder = lease_holder(lease)
            worker = worker_pids.get(int(str(holder.get("ppid", 0) or 0)))
            if worker and lease_is_held(lease) and list(home.glob("store/generations/*/R/*.parquet")):
                parent = next(pid for pid, name in worker_pids.items() if name == worker)
                os.killpg(parent, signal.SIGKILL)
                os.kill(int(str(holder["pid"])), signal.SIGKILL)
                return worker
        time.sleep(0.2)
    return None


def run_fanned_out(env: dict[str, str], home: Path, worker_pids: dict[int, str]) -> tuple[RunManifest, str | None]:
    """`mai run ... --workers 2` in a subprocess; one worker killed while it runs a shard."""
    import subprocess

    command = [sys.executable, "-m", "mai.cli", "--home", str(home), "run", "--limit", "24", "--shards", "2",
               "--workers", "2", "--batch-size", "4", "--max-new-tokens", "R=160", "--name", RUN_NAME, "--json"]
    done = threading.Event()
    killed: list[str | None] = [None]
    watcher = threading.Thread(target=lambda: killed.__setitem__(0, kill_a_running_shard(home, worker_pids, done)))
    watcher.start()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    done.set()
    watcher.join()
    if result.returncode != 0:
        raise RuntimeError(f"the run failed: {result.stderr[-3000:]}")
    return json.loads(result.stdout), killed[0]


def parent_flow_run_id(env: dict[str, str]) -> str:
    import httpx

    response = httpx.post(env["PREFECT_API_URL"] + "/flow_runs/filter",
                          json={"flow_runs": {"name": {"any_": [f"mai-run/{RUN_NAME}"]}}}, timeout=30)
    response.raise_for_status()
    runs = response.json()
    if len(runs) != 1:
        raise RuntimeError(f"expected one flow run named mai-run/{RUN_NAME}, found {len(runs)}")
    return str(runs[0]["id"])


def crashed_drain_id(env: dict[str, str], timeout_s: float = 300.0) -> str:
    """The killed worker's drain flow run, once Prefect's zombie automation (which the run created) has marked it
    Crashed: within three heartbeat intervals (90 s) of its last heartbeat, so possibly after the run completed."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.post(env["PREFECT_API_URL"] + "/flow_runs/filter", timeout=30, json={
            "flows": {"name": {"any_": ["mai-drain"]}}, "flow_runs": {"state": {"type": {"any_": ["CRASHED"]}}}})
        response.raise_for_status()
        if crashed := response.json():
            return str(crashed[0]["id"])
        time.sleep(2.0)
    raise RuntimeError(f"no drain flow run was marked Crashed within {timeout_s:g} s")


def check_in_browser(ui_url: str, flow_run_id: str, drain_id: str, shots: Path) -> dict[str, bool]:
    """Open the killed drain's flow-run page (its Crashed state must show) and the parent flow run's (its name must
    show)."""
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(f"{ui_url}/runs/flow-run/{drain_id}")
        crashed = page.get_by_text("Crashed").first
        crashed.wait_for(timeout=60_000)
        crashed.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "lost-drain-crashed.png"), full_page=False)
        page.goto(f"{ui_url}/runs/flow-run/{flow_run_id}")
        page.get_by_text(f"mai-run/{RUN_NAME}").first.wait_for(timeout=60_000)
        page.goto(f"{ui_url}/runs?tab=flow-runs")
        page.get_by_text(f"mai-run/{RUN_NAME}").first.wait_for(timeout=60_000)
        page.screenshot(path=str(shots / "flow-runs.png"), full_page=False)
        browser.close()
    return {"name_shown": True, "lost_drain_crashed": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shots", type=Path, default=REPO / "docs" / "prefect")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mai-ui-check-") as scratch:
        directory, port = Path(scratch), free_port()
        ui_url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PREFECT_HOME": str(directory / "prefect"), "PREFECT_API_URL": f"{ui_url}/api",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_WORKER_QUERY_SECONDS": "1",
               "PREFECT_WORKER_PREFETCH_SECONDS": "0", "PREFECT_LOGGING_LEVEL": "INFO", "HF_HUB_OFFLINE": "1"}
        processes = [start([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                            str(port)], env, directory / "server.log")]
        try:
            wait_for_api(env)
            deploy_shard(env, directory)
            home = directory / "home"
            workers = {f"worker-{name}": start([sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL,
                                                "--limit", "1", "--name", f"worker-{name}"],
                                               {**env, "MAI_HOME": str(home)}, directory / f"worker-{name}.log")
                       for name in ("a", "b")}
            processes += list(workers.values())
            manifest, killed = run_fanned_out(env, home, {p.pid: name for name, p in workers.items()})
            checked = check_in_browser(ui_url, parent_flow_run_id(env), crashed_drain_id(env), args.shots)
            print(json.dumps({"run_id": manifest["run_id"], "routes": manifest["routes"], "killed": killed,
                              **checked, "screenshots": sorted(str(p) for p in args.shots.glob("*.png"))}, indent=1))
        finally:
            stop(processes)


if __name__ == "__main__":
    main()
