"""`prefect.yaml` deploys with the real Prefect CLI against the session's Prefect server: every deployment
registers on the `mai-gpu` process pool with typed parameters (a bad value is refused when a run is created),
the nightly schedule is in place, and the configurations are the ones the code defines (no drift between the
YAML and `shapes_pair_config`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.prefect

REPO = Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "prefect.yaml"


def deployments() -> list[dict[str, Any]]:
    return yaml.safe_load(PREFECT_YAML.read_text())["deployments"]


def test_deployment_parameters_are_the_codes_configurations() -> None:
    from prefect.flows import load_flow_from_entrypoint

    from mai.config import RunConfig, shapes_pair_config

    by_name = {d["name"]: d for d in deployments()}
    assert set(by_name) == {"cascade", "shapes-ci", "shapes-nightly", "transfer-layer-sweep", "drain", "probe"}
    for deployment in by_name.values():
        flow = load_flow_from_entrypoint(deployment["entrypoint"])
        # drain: created by mai-run with the run's plan; probe: by `mai store check --pool`; neither has defaults
        if deployment["name"] not in ("drain", "probe"):
            flow.validate_parameters(deployment.get("parameters", {}))  # raises on a wrong name or type
        assert deployment["work_pool"]["name"] == "mai-gpu"
    assert RunConfig(**by_name["cascade"]["parameters"]["config"]) == shapes_pair_config(mode="cascade")
    assert RunConfig(**by_name["transfer-layer-sweep"]["parameters"]["config"]) == shapes_pair_config()
    # the regression gates pass no config: the flow's default (the shapes pair vs the shipped baseline)
    assert "config" not in by_name["shapes-ci"]["parameters"]


def prefect_cli(*args: str, api_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_LOGGING_LEVEL": "WARNING"}
    return subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", *args], check=False, cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_prefect_deploy_all_registers_typed_deployments_on_the_gpu_pool() -> None:
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    assert api_url and "127.0.0.1" in api_url
    created = prefect_cli("work-pool", "create", "mai-gpu", "--type", "process", "--overwrite", api_url=api_url)
    assert created.returncode == 0, created.stderr
    deployed = prefect_cli("deploy", "--all", api_url=api_url)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    async def read() -> dict[str, Any]:
        async with get_client() as client:
            found = {}
            for name in ("mai-run/cascade", "mai-regression/shapes-ci", "mai-regression/shapes-nightly",
                         "mai-sweep/transfer-layer-sweep"):
                found[name] = await client.read_deployment_by_name(name)
            return found

    found = asyncio.run(read())
    assert {d.work_pool_name for d in found.values()} == {"mai-gpu"}
    nightly = found["mai-regression/shapes-nightly"]
    assert [s.schedule.cron for s in nightly.schedules] == ["0 2 * * *"]
    assert "config" in found["mai-run/cascade"].parameter_openapi_schema["properties"]
    assert found["mai-run/cascade"].parameters["config"]["benchmark"] == "shapes"

    # a run is created (scheduled for a worker; none runs here) and a mistyped parameter is refused up front
    run = run_deployment("mai-regression/shapes-ci", parameters={"alpha": 0.01}, timeout=0)
    assert run.parameters["alpha"] == 0.01
    with pytest.raises(Exception, match="(?i)valid"):
        run_deployment("mai-regression/shapes-ci", parameters={"alpha": "often"}, timeout=0)


def test_a_run_planned_in_a_deployment_records_the_deployment_as_its_command(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    from mai.flows.deployment import started_by

    assert started_by("mai run --limit 6") == "mai run --limit 6"  # no deployment: the process's command line
    for key, value in {"DEPLOYMENT__NAME": "cascade-test", "FLOW_RUN__FLOW_NAME": "mai-run",
                       "FLOW_RUN__ID": "0b7e"}.items():
        monkeypatch.setenv(f"PREFECT__RUNTIME__{key}", value)  # what prefect.runtime reads in a deployment run
    assert started_by("prefect flow-run execute") == \
        "Prefect deployment mai-run/cascade-test, flow run 0b7e (process: prefect flow-run execute)"


def test_the_zombie_automations_are_created_once() -> None:
    """A fanned-out run creates Prefect's zombie automation for its drains and shards, and the one that watches a
    drain from its Running; a server that has them (by name) is left as it is."""
    from prefect.client.orchestration import get_client

    from mai.flows.fanout import DRAIN_START_AUTOMATION, ZOMBIE_AUTOMATION, ensure_zombie_automation

    with get_client(sync_client=True) as client:
        for name in (ZOMBIE_AUTOMATION, DRAIN_START_AUTOMATION):
            for old in client.read_automations_by_name(name):
                client.delete_automation(old.id)
        assert ensure_zombie_automation(client)
        [heartbeats] = client.read_automations_by_name(ZOMBIE_AUTOMATION)
        [start] = client.read_automations_by_name(DRAIN_START_AUTOMATION)
        assert heartbeats.trigger.after == {"prefect.flow-run.heartbeat"}  # type: ignore[union-attr]
        # from Running only for drains: a run's shards in its own process send no heartbeats
        assert start.trigger.after == {"prefect.flow-run.Running"}  # type: ignore[union-attr]
        assert start.trigger.match_related.get("prefect.resource.name") == ["mai-drain"]  # type: ignore[union-attr]
        assert not ensure_zombie_automation(client)
        assert len(client.read_automations_by_name(ZOMBIE_AUTOMATION)) == 1
