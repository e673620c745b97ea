"""The run's three executors (issue 60): in this process with no Prefect (`mai run --local`, `api.run(local=True)`),
the `mai-run` flow, and the work pool (tests/test_fanout.py compares that one). Each computes the same shard steps
into the same store records, so each gives the same stored outputs and routes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.config import RunConfig
from mai.errors import ConfigError
from mai.storage.paths import Home
from mai.storage.runs import is_complete, read_routes
from tests.helpers import BUDGET, comparable, run, seeded_store

REPO = Path(__file__).resolve().parents[1]
LIMIT = 8


def stored_outputs(home: Path) -> list[tuple[Any, ...]]:
    """Every stored generation's identity and text, through the catalog (the same on every executor)."""
    _, rows = api.query(home, "SELECT gen_id, model, prompt_kind, text, output_token_ids FROM generations ORDER BY gen_id")
    return [tuple(row) for row in rows]


def test_mai_run_local_computes_with_no_prefect_and_no_server(home: Path) -> None:
    """With PREFECT_API_URL naming a closed port: the run computes, imports no Prefect (so starts no server and
    calls no API) and is complete in the store."""
    script = f"""
import json, sys
from mai.cli import main
code = main(["--home", {str(home)!r}, "run", "--local", "--limit", "{LIMIT}", "--shards", "2", "--json",
             *[f"--max-new-tokens={{k}}={{v}}" for k, v in {BUDGET!r}.items()]])
print(json.dumps({{"code": code, "prefect": sorted(m for m in sys.modules if m.split(".")[0] == "prefect")}}))
"""
    env = {"PREFECT_API_URL": "http://127.0.0.1:9/api", "PATH": "/usr/bin:/bin", "HOME": str(home.parent),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result == {"code": 0, "prefect": []}
    manifest = json.loads("\n".join(lines[:-1]))
    assert manifest["counts"]["generations_computed"] > 0
    assert is_complete(Home.at(home), manifest["run_id"])
    assert len(read_routes(Home.at(home), manifest["run_id"])) == LIMIT
    # every second of the command in a phase: its start, then the run's wall time phase by phase, then what follows
    timings = manifest["timings"]
    assert timings["startup_s"] > 0 and timings["compaction_s"] >= 0 and timings["manifest_s"] > 0
    inside = ("plan_s", "materialize_s", "shards_s", "route_and_score_s")
    assert abs(sum(timings[name] for name in inside) - timings["wall_s"]) < 0.05


def test_local_and_workers_are_one_choice(home: Path) -> None:
    with pytest.raises(ConfigError, match="--local computes in this process, --workers 2 fans the shards out"):
        api.run(RunConfig(home=str(home), limit=LIMIT, workers=2), progress=False, local=True)


@pytest.mark.prefect
def test_in_process_and_flow_executors_store_the_same_outputs_and_routes(home: Path, tmp_path: Path) -> None:
    other = seeded_store(tmp_path / "flow", home)
    values = {"limit": LIMIT, "shards": 2, "batch_size": 8, "max_new_tokens": BUDGET}
    local = api.run(RunConfig(home=str(home), **values), progress=False, local=True)
    flow = run(other, flow=True, **values)
    assert comparable(read_routes(Home.at(home), local["run_id"])) == \
        comparable(read_routes(Home.at(other), flow["run_id"]))
    assert local["metrics"] == flow["metrics"] and local["routes"] == flow["routes"]
    assert local["counts"] == flow["counts"]
    assert stored_outputs(home) == stored_outputs(other)
    rerun = api.run(RunConfig(home=str(home), **values), progress=False)  # a lookup on the in-process store
    assert rerun["counts"]["generations_computed"] == 0


@pytest.mark.prefect
def test_a_flow_run_receives_the_commands_resolution_and_does_not_resolve_again(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command resolves once and hands the resolution to the flow: the shards the store answered come to the
    flow through the run's record, with the stage maps the lookup found (the routes are those of the first run),
    and the seconds between the two are the run's `handover_s`."""
    import mai.run.steps

    values = {"limit": LIMIT, "shards": 2, "batch_size": 8, "max_new_tokens": BUDGET}
    first = api.run(RunConfig(home=str(home), **values), progress=False, local=True)
    lookups: list[list[str]] = []
    real = mai.run.steps.resolve_identities

    def first_shard_only(plan: Any, shard_paths: list[str]) -> dict[str, Any]:
        """The store's answer for the first shard only: the second goes to the flow's executor."""
        lookups.append(list(shard_paths))
        return {shard: outcome for shard, outcome in real(plan, shard_paths).items() if shard == shard_paths[0]}

    monkeypatch.setattr(mai.run.steps, "resolve_identities", first_shard_only)
    again = api.run(RunConfig(home=str(home), **values), progress=False)  # the default: the mai-run flow
    assert len(lookups) == 1  # by the command; the flow took its resolution over
    assert again["counts"]["generations_computed"] == 0  # the executor's shard found its outputs stored
    assert comparable(read_routes(Home.at(home), again["run_id"])) == \
        comparable(read_routes(Home.at(home), first["run_id"]))
    assert {"plan_s", "materialize_s", "handover_s", "shards_s"} <= set(again["timings"])
