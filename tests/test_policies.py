"""The routing-policy lab over a real store: each policy that a stored run also computed gives that run's numbers
(scores, output tokens, calls per model, routing counts, equation-27 seconds), read here from the Parquet files;
the oracle bounds every policy; a policy whose outputs are missing names a `mai run` that computes exactly them."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shlex
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.report_store import LIMIT, Store, report_store

STAGES = ("s_large", "s_small", "r_small", "s2_small", "rt_large", "single", "single_s2")
SAME_AS_RUN = {"cascade": "cascade", "cascade +S2": "cascade_s2", "Full RT": "full_rt", "small S alone": "small_s",
               "large S alone": "large_s", "small R alone": "small_r", "small R+S2 alone": "small_r_s2",
               "large R alone": "large_r"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, prefect_server: str, assets_home: Path,
          shapes_dataset: Path) -> Store:
    return report_store(tmp_path_factory, assets_home, shapes_dataset)


def _generations(home: Path) -> dict[str, dict[str, Any]]:
    files = sorted((home / "store" / "generations").glob("*/*/*.parquet"))
    return {r["gen_id"]: r for f in files
            for r in pq.read_table(f, columns=["gen_id", "model", "output_tokens"]).to_pylist()}


def _stored_run(home: Path, run_id: str, generations: dict[str, dict[str, Any]]) -> dict[str, Any]:
    routes = pq.read_table(home / "store" / "routes" / run_id / "routes.parquet").to_pylist()
    used = [generations[r[f"gen_{s}"]] for r in routes for s in STAGES if r[f"gen_{s}"]]
    (path,) = (home / "store" / "estimates" / run_id).glob("*.parquet")  # one estimate per run
    estimate = pq.read_table(path).to_pylist()
    return {"mean_score": sum(r["score"] for r in routes) / len(routes),
            "output_tokens": sum(g["output_tokens"] for g in used),
            "small_calls": sum(g["model"] == "mai-shapes-small" for g in used),
            "large_calls": sum(g["model"] == "mai-shapes-large" for g in used),
            "seconds": next(e["total_s"] for e in estimate if e["stage"] == "total"),
            "routes": {label: sum(r["route"] == label for r in routes) for label in ("MV1", "MV2", "RT")}}


@pytest.mark.prefect
def test_policies_equal_the_stored_runs_and_the_oracle_bounds_them(store: Store,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from mai.cli import main

    assert main(["--home", str(store.home), "policies", "--benchmark", "shapes", "--json"]) == 0
    (lab,) = json.loads(capsys.readouterr().out)
    assert lab["samples"] == LIMIT and lab["errors"] == 0 and lab["conflicting_outputs"] == 0
    assert lab["latency_profiles"] == {"small": "h100-2b", "large": "h100-8b"}  # from the stored estimates
    assert lab["cost_axis"] == "seconds"
    assert {r["run_id"] for r in lab["runs"]} == set(store.runs.values())
    policies = {p["name"]: p for p in lab["policies"]}
    assert all(p["available"] and p["n"] == LIMIT for p in policies.values())
    for name, p in policies.items():  # the mean score's 95 % interval over the n samples
        low, high = p["score_interval"]
        assert 0 <= low <= p["mean_score"] <= high <= 1 and low < high, name

    generations = _generations(store.home)
    for name, run in SAME_AS_RUN.items():
        stored, policy = _stored_run(store.home, store.runs[run], generations), policies[name]
        assert policy["mean_score"] == pytest.approx(stored["mean_score"], abs=1e-12), name
        for key in ("output_tokens", "small_calls", "large_calls"):
            assert policy[key] == stored[key], (name, key)
        assert policy["seconds"] == pytest.approx(stored["seconds"], rel=1e-9), name
        if name.startswith("cascade"):
            assert policy["routes"] == stored["routes"], name
    assert policies["cascade"]["routes"]["MV1"] < LIMIT  # the store has disagreements to route

    oracle = policies["oracle"]["mean_score"]
    assert all(oracle >= p["mean_score"] for p in policies.values())
    assert oracle > policies["cascade"]["mean_score"] or policies["cascade"]["mean_score"] == 1.0
    # the frontier goes up in score as it goes up in cost, and holds the cheapest policy
    frontier = [policies[name] for name in lab["summary"]["frontier"]]
    assert frontier[0]["seconds"] == min(p["seconds"] for n, p in policies.items() if n != "oracle")
    assert all(a["seconds"] <= b["seconds"] and a["mean_score"] < b["mean_score"]
               for a, b in itertools.pairwise(frontier))
    assert lab["summary"]["apgr"] >= lab["summary"]["apgr_baselines"]

    assert main(["--home", str(store.home), "policies", "--benchmark", "shapes"]) == 0
    text = capsys.readouterr().out
    assert "cascade" in text and "oracle" in text and "APGR" in text
    low, high = policies["cascade"]["score_interval"]
    (line,) = [line for line in text.splitlines() if line.startswith(f"{'cascade':22s} ")]  # not "cascade +S2"
    assert line.split()[1:5] == [f"{100 * policies['cascade']['mean_score']:.1f}", f"[{100 * low:.1f},",
                                 f"{100 * high:.1f}]", str(LIMIT)]  # score %, its interval, n


@pytest.mark.prefect
def test_a_policy_without_its_outputs_names_the_run_that_stores_them(store: Store) -> None:
    from mai.cli import _parser
    from mai.cli.options import run_config
    from mai.dashboards.policies import find_groups, policy_lab
    from mai.storage.paths import Home

    home = Home.at(store.home)
    (group,) = find_groups(home, "shapes")
    only_cascade = dataclasses.replace(group, runs=tuple(r for r in group.runs
                                                         if r["run_id"] == store.runs["cascade"]))
    lab = policy_lab(home, only_cascade)
    policies = {p["name"]: p for p in lab["policies"]}
    cascade = policies["cascade"]
    assert cascade["available"] and cascade["missing_samples"] == 0
    full_rt = policies["Full RT"]
    # the cascade stored small R and RT only for the samples MV1 did not settle
    assert not full_rt["available"] and full_rt["missing_samples"] == cascade["routes"]["MV1"] + cascade["routes"]["MV2"]
    (command,) = full_rt["commands"]
    args = _parser().parse_args(["--home", str(store.home), *shlex.split(command)[1:]])
    assert args.handler.__name__ == "_run"
    stored_key = next(r["config_key"] for r in group.runs if r["run_id"] == store.runs["full_rt"])
    assert run_config(args).key() == stored_key  # the very configuration of the stored Full RT run


def test_output_kinds_follow_the_stage_table() -> None:
    """The lab's kinds, what each consumes and the run storing it come from `mai.cascade`'s stage table."""
    from mai import cascade
    from mai.dashboards.outputs import OUTPUT_KINDS

    assert list(OUTPUT_KINDS)[:6] == ["small S", "small S+S2", "small E", "small E+S2", "small R", "small R+S2"]
    assert list(OUTPUT_KINDS)[-1] == cascade.RT_LARGE.label == "RT"
    for stages in (cascade.stages_for("cascade", True), cascade.single_stages("large", "E", True)):
        labels = {stage.name: stage.label for stage in stages}
        for stage in stages:
            assert OUTPUT_KINDS[stage.label].consumes == (labels[stage.upstream] if stage.upstream else None)
            assert OUTPUT_KINDS[stage.label].role == stage.role
    assert OUTPUT_KINDS["RT"].run_flags() == ["--mode", "full_rt"] and OUTPUT_KINDS["RT"].baseline_name == "Full RT"
    assert OUTPUT_KINDS["large E+S2"].run_flags() == ["--mode", "single", "--single-model", "large",
                                                      "--single-prompt", "E", "--s2"]
    # a sparse run's RT reads a layer's selection: not one output the lab can combine across runs
    assert not {cascade.SELECT_RT.label, cascade.RT_LARGE_SPARSE.label} & set(OUTPUT_KINDS)


def test_the_budget_axis_is_fixed_by_definition() -> None:
    from mai.dashboards.frontier import PolicyPoint, frontier

    def point(name: str, cost: float, score: float) -> PolicyPoint:
        return PolicyPoint(name, True, True, score, cost, cost)

    points = [point("small S", 1.0, 0.5), point("cascade", 1.5, 0.85), point("large S", 2.0, 0.9),
              point("large R", 5.0, 0.95)]
    found = frontier(points, "seconds", "small S", "large S", "oracle", ("small S", "large R"))
    # budgets 0 .. 1 from small S (1 s) to large R (5 s): PGR 0 until 0.125, 0.875 until 0.25, then 1.0 (large R's
    # 1.125 only at the very end)
    assert found.budget == (1.0, 5.0)
    assert found.apgr == pytest.approx(0.875 * 0.125 + 1.0 * 0.75)
    # a policy dearer than large R, or one in range below the frontier, leaves the axis and the area where they are
    more = frontier([*points, point("dear", 10.0, 1.0), point("poor", 3.0, 0.6)], "seconds", "small S", "large S",
                    "oracle", ("small S", "large R"))
    assert (more.budget, more.apgr) == (found.budget, found.apgr)
    # without an end of the axis there is no area
    assert frontier(points[:3], "seconds", "small S", "large S", "oracle", ("small S", "large R")).apgr is None
