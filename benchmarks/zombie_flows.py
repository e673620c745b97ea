"""How long Prefect's own zombie detection takes to mark a flow run Crashed whose process was SIGKILLed (results in
docs/benchmarks.md, "Lost workers"): issue 48 asks whether Prefect's flow-run heartbeats and its documented
automation ("detect zombie flows") can replace mai's own lost-drain detection (a drain's lease in the store,
flows/fanout.py), which marks a lost drain Crashed once its lease has been free for 10 s.

The set-up is a self-hosted server as a team keeps one: `prefect server start` (every service, the triggers service
that evaluates proactive automations included) on a SQLite database of its own, and the automation of
docs/cluster.md created on it with `within` = 3 heartbeat intervals. A flow run in its own process sends heartbeats
every `--frequency` seconds (PREFECT_FLOWS_HEARTBEAT_FREQUENCY, at least 30: Prefect's minimum) and sleeps; once
its first heartbeat event is in the server, the process is SIGKILLed (what a lost host looks like from the server:
nothing more arrives). The script prints the seconds from the kill to the flow run's Crashed state, `--repeats`
times, and a last line `median <s>`.

Run: `.venv/bin/python benchmarks/zombie_flows.py [--repeats 3] [--frequency 30]` (about 2 minutes per repeat at
the minimum frequency).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

SLEEPING_FLOW = """
import time
from prefect import flow

@flow(name="zombie-candidate", persist_result=False)
def sleeping() -> None:
    time.sleep(3600)

sleeping()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--frequency", type=int, default=30, help="PREFECT_FLOWS_HEARTBEAT_FREQUENCY (>= 30)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up on one repeat after this many seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mai-zombie-") as scratch:
        env = _server_env(Path(scratch))
        server = _start_server(env)
        try:
            _create_automation(env["PREFECT_API_URL"], within_s=3 * args.frequency)
            took = [_one_lost_flow_run(env, args.frequency, args.timeout) for _ in range(args.repeats)]
        finally:
            server.terminate()
            server.wait(timeout=30)
    for index, seconds in enumerate(took, 1):
        print(f"repeat {index}: Crashed {seconds:.1f} s after SIGKILL")
    print(f"heartbeat every {args.frequency} s, automation within {3 * args.frequency} s")
    print(f"median {statistics.median(took):.1f}")
    return 0


def _server_env(scratch: Path) -> dict[str, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {**os.environ, "PREFECT_HOME": str(scratch / "prefect-home"), "PREFECT_UI_ENABLED": "0",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{scratch / 'prefect.db'}",
            "PREFECT_LOGGING_LEVEL": "WARNING"}


def _start_server(env: dict[str, str]) -> subprocess.Popen[bytes]:
    from mai.flows.prefect_api import healthy

    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not healthy(env["PREFECT_API_URL"]):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"prefect server start did not answer (exit status {server.poll()})")
        time.sleep(0.5)
    return server


def _create_automation(api_url: str, within_s: int) -> None:
    """docs/cluster.md's automation, on this server."""
    os.environ["PREFECT_API_URL"] = api_url
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    Automation(
        name="Crash zombie flow runs",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=within_s)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message="no heartbeat for three intervals")],
    ).create()


def _one_lost_flow_run(env: dict[str, str], frequency: int, timeout_s: float) -> float:
    """Starts the sleeping flow, kills it after its first heartbeat, and returns the seconds until it is Crashed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    process = subprocess.Popen([sys.executable, "-c", SLEEPING_FLOW],
                               env={**env, "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(frequency)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])))
    named = FlowFilter(name=FlowFilterName(any_=["zombie-candidate"]))
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        flow_run = None
        while flow_run is None:
            found = client.read_flow_runs(flow_filter=named, flow_run_filter=running)
            flow_run = found[0] if found else None
            _wait(deadline, process, "the flow run to start")
        while not _heard_a_heartbeat(client, str(flow_run.id)):
            _wait(deadline, process, "its first heartbeat")
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed = time.monotonic()
        while (state := client.read_flow_run(flow_run.id).state) is None or state.type != StateType.CRASHED:
            if time.monotonic() > deadline:
                raise SystemExit(f"flow run {flow_run.id} still {state.type if state else None} after {timeout_s} s")
            time.sleep(1.0)
        return time.monotonic() - killed


def _heard_a_heartbeat(client: SyncPrefectClient, flow_run_id: str) -> bool:
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    found = client.read_events(filter=EventFilter(
        event=EventNameFilter(name=["prefect.flow-run.heartbeat"]),
        resource=EventResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"])), limit=1)  # the server allows <= 50
    return bool(found.events)


def _wait(deadline: float, process: subprocess.Popen[bytes], what: str) -> None:
    if process.poll() is not None:
        raise SystemExit(f"the flow's process ended (exit status {process.returncode}) while waiting for {what}")
    if time.monotonic() > deadline:
        process.kill()
        raise SystemExit(f"timed out waiting for {what}")
    time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
