"""`mai server start|status|stop`: a persistent local Prefect server that later `mai` commands use when no
PREFECT_API_URL is set, and that stops with `mai server stop`, leaving no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.prefect

REPO = Path(__file__).resolve().parents[1]


def mai(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mai.flows.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_commands_use_the_local_server_until_it_stops(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(MAI_PREFECT_SERVER_DIR=str(tmp_path / "server"), HF_HUB_OFFLINE="1", PREFECT_LOGGING_LEVEL="WARNING")
    assert mai(env, "server", "status").returncode == 1
    started = mai(env, "server", "start")
    state = json.loads((tmp_path / "server" / "server.json").read_text())
    try:
        assert started.returncode == 0 and state["url"] in started.stdout, started.stderr
        assert mai(env, "server", "status").returncode == 0
        run = mai(env, "--home", str(tmp_path / "store"), "run", "--limit", "4", "--shards", "1", "--name",
                  "on-the-local-server", "--max-new-tokens", "R=8", "--json")
        assert run.returncode == 0, run.stderr[-2000:]
        found = httpx.post(f"{state['url']}/flow_runs/filter", timeout=30,
                           json={"flow_runs": {"name": {"any_": ["mai-run/on-the-local-server"]}}}).json()
        assert [r["state_type"] for r in found] == ["COMPLETED"]  # the run's flow ran on that server
        _a_cached_rerun_is_recorded_there(env, tmp_path / "store", state["url"])
    finally:
        stopped = mai(env, "server", "stop")
    assert stopped.returncode == 0 and state["url"] in stopped.stdout
    assert not alive(state["pid"])
    assert mai(env, "server", "status").returncode == 1


def _a_cached_rerun_is_recorded_there(env: dict[str, str], home: Path, url: str) -> None:
    """The same configuration again is answered from the store without Prefect's flow engine (flows/stored_run.py)
    and recorded on the local server: a Completed `mai-run/<name>` flow run with the flow's artifacts, no task run."""
    again = mai(env, "--home", str(home), "run", "--limit", "4", "--shards", "1", "--name", "cached-on-the-local-server",
                "--max-new-tokens", "R=8", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["counts"]["generations_computed"] == 0
    (found,) = httpx.post(f"{url}/flow_runs/filter", timeout=30,
                          json={"flow_runs": {"name": {"any_": ["mai-run/cached-on-the-local-server"]}}}).json()
    assert found["state_type"] == "COMPLETED"
    tasks = httpx.post(f"{url}/task_runs/filter", timeout=30,
                       json={"flow_runs": {"id": {"any_": [found["id"]]}}}).json()
    artifacts = httpx.post(f"{url}/artifacts/filter", timeout=30,
                           json={"artifacts": {"flow_run_id": {"any_": [found["id"]]}}}).json()
    assert tasks == []
    assert {"mai-run-summary", "mai-run-routing", "mai-run-metrics", "mai-run-report"} <= {a["key"] for a in artifacts}


def session_processes(session: int) -> list[int]:
    """Processes whose session id is `session` (field 6 of /proc/PID/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:
            found.append(int(stat.parent.name))
    return found


def test_a_killed_run_leaves_no_process_behind(tmp_path: Path) -> None:
    """SIGKILL of `mai run` while it generates: the temporary Prefect server it started dies with it."""
    import signal
    import time

    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(MAI_PREFECT_SERVER_DIR=str(tmp_path / "no-server"), HF_HUB_OFFLINE="1",
               PREFECT_LOGGING_LEVEL="WARNING", PREFECT_HOME=str(tmp_path / "a-fresh-prefect-home"))  # not made yet
    home = tmp_path / "store"
    with open(tmp_path / "run.log", "wb") as log:
        run = subprocess.Popen([sys.executable, "-m", "mai.flows.cli", "--home", str(home), "run", "--limit", "24",
                                "--shards", "1", "--max-new-tokens", "R=64"], cwd=REPO, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(home.glob("store/generations/*/S/*.parquet")) and time.monotonic() < deadline:
        assert run.poll() is None, (tmp_path / "run.log").read_text()[-2000:]
        time.sleep(0.2)
    assert len(session_processes(run.pid)) >= 2, "the run had not started its temporary server"
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 20
    while session_processes(run.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(run.pid) == []


def test_temporary_servers_started_together_share_a_fresh_database(tmp_path: Path) -> None:
    """Three commands that start their temporary Prefect server at once on one fresh PREFECT_HOME all get one: the
    starts take turns, so no two servers migrate the new database together (alembic failed all but one: 3 of 4
    tries with three servers before the lock)."""
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "a-fresh-prefect-home"), PREFECT_LOGGING_LEVEL="WARNING")
    start = "from mai.flows.local_server import start_temporary_server; start_temporary_server(); print('ok')"
    starts = [subprocess.Popen([sys.executable, "-c", start], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(3)]
    results = [process.communicate(timeout=300) for process in starts]
    assert [out.strip() for out, _ in results] == ["ok"] * 3, [err[-1500:] for _, err in results]
