"""`mai server start|status|stop`: a persistent local Prefect server that later `mai` commands use when no
PREFECT_API_URL is set, and that stops with `mai server stop`, leaving no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

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
    finally:
        stopped = mai(env, "server", "stop")
    assert stopped.returncode == 0 and state["url"] in stopped.stdout
    assert not alive(state["pid"])
    assert mai(env, "server", "status").returncode == 1
