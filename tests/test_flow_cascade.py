"""The cascade end to end through the real Prefect engine, the real tiny models and real DuckDB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mai.backends.registry import loaded_engines
from mai.storage.catalog import query
from mai.storage.paths import Home
from mai.storage.runs import read_manifest, read_routes
from tests.helpers import LIMIT, comparable, engine_generations, run, stored_generations

pytestmark = pytest.mark.prefect


def test_cascade_rerun_s2_toggle_new_large_model_and_baselines_reuse_cascade_outputs(home: Path) -> None:
    """One store, each run checked against what the runs before it stored: the cascade, its identical re-run, S2
    toggled, the large model changed, then the baselines (full RT, single large S, single small E+S2)."""
    first = run(home, flow=True)
    routes = first["routes"]
    assert first["counts"]["valid"] == LIMIT
    assert routes["MV1"] + routes["MV2"] + routes["RT"] == LIMIT
    assert len({r["shard"] for r in read_routes(Home.at(home), first["run_id"])}) == 2
    assert first["counts"]["generations_computed"] == first["counts"]["engine_generations"] > 0
    assert first["counts"]["generations_computed"] == first["counts"]["generations_needed"]
    reaching_stage2 = LIMIT - routes["MV1"]
    assert first["stages"]["r_small"]["generations"] == reaching_stage2
    assert first["stages"]["rt_large"]["generations"] == routes["RT"]

    # identical configuration: nothing is generated, everything is identical
    before = engine_generations()
    again = run(home, flow=True)
    assert engine_generations() == before
    assert again["counts"]["generations_computed"] == 0
    assert again["counts"]["generations_reused"] == first["counts"]["generations_needed"]
    assert comparable(read_routes(Home.at(home), again["run_id"])) == comparable(
        read_routes(Home.at(home), first["run_id"]))
    assert again["metrics"] == first["metrics"]

    # toggling S2: only S2 generations, only for the samples that reached stage 2
    with_s2 = run(home, flow=True, s2=True)
    computed = stored_generations(home, with_s2["run_id"])
    assert {r["prompt_kind"] for r in computed} <= {"S2", "RT"}
    assert sum(r["prompt_kind"] == "S2" for r in computed) == reaching_stage2
    # RT is needed again only where S2 changed the small model's answer so that MV2 now fails
    new_rt = {r["gen_id"] for r in computed if r["prompt_kind"] == "RT"}
    assert new_rt.isdisjoint({r["gen_rt_large"] for r in read_routes(Home.at(home), first["run_id"])})

    # changing only the large model: every small-model output is reused
    from mai.backends.tiny_models import LARGE_NAME, build_variant

    other = build_variant(Home.at(home).models, "mai-tiny-large-b", size=LARGE_NAME, seed=7)
    before = engine_generations()
    swapped = run(home, flow=True, large_model=str(other))
    computed = stored_generations(home, swapped["run_id"])
    assert computed and {r["model"] for r in computed} == {"mai-tiny-large-b"}
    small_engines = [e for e in loaded_engines() if e.model.identity_name == "mai-tiny-small"]
    assert small_engines and all(e.counters.generations == before["mai-tiny-small"] for e in small_engines)

    # the catalog answers SQL over all four runs
    _, rows = query(Home.at(home), "SELECT count(*), count(DISTINCT config_key) FROM runs")
    assert rows == [(4, 3)]
    _, rows = query(Home.at(home), "SELECT count(*) FROM routes WHERE run_id = ?".replace("?", f"'{first['run_id']}'"))
    assert rows == [(LIMIT,)]
    manifest = read_manifest(Home.at(home), first["run_id"])
    assert manifest["versions"]["prefect"] and manifest["config"]["limit"] == LIMIT

    # the baselines reuse the cascade's outputs: full RT computes small R only for the samples no cascade run above
    # gave one (those that reached stage 2 in any of them)
    stored_r = {r["gen_r_small"] for one in (first, with_s2, swapped)
                for r in read_routes(Home.at(home), one["run_id"]) if r["gen_r_small"]}
    assert reaching_stage2 <= len(stored_r) < LIMIT  # some samples' R is stored, some must be computed
    full_rt = run(home, flow=True, mode="full_rt")
    assert full_rt["routes"]["RT"] == LIMIT
    computed = stored_generations(home, full_rt["run_id"])
    assert sum(r["prompt_kind"] == "R" for r in computed) == LIMIT - len(stored_r)
    single = run(home, flow=True, mode="single", single_model="large", single_prompt="S")
    assert single["routes"]["SINGLE"] == LIMIT
    assert single["counts"]["generations_computed"] == 0  # the cascade's MV1 large-S outputs
    explain = run(home, flow=True, mode="single", single_model="small", single_prompt="E", s2=True)
    assert explain["stages"]["single_s2"]["generations"] == LIMIT
    kinds = {r["prompt_kind"] for r in stored_generations(home, explain["run_id"])}
    assert kinds == {"E", "S2"}  # S2 after E is not the cascade's S2 after R: computed


def test_unknown_model_or_benchmark_fails_before_loading(home: Path) -> None:
    from mai.cli import main
    from mai.errors import ConfigError

    with pytest.raises(ConfigError, match="neither an existing local directory"):
        run(home, flow=True, large_model=str(home / "no-such-model"))
    assert loaded_engines() == []
    assert main(["--home", str(home), "run", "--benchmark", "mmlu-nope"]) == 2
    assert main(["--home", str(home), "run", "--small-model", "./missing"]) == 2
    assert loaded_engines() == []


def test_in_process_shards_emit_no_heartbeats_and_the_run_keeps_its_own(home: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A flow run's end waits for its heartbeat thread's 1 s sleep (flows/fanout.py): shard subflows in the parent's
    process run without heartbeats, the parent flow with what the user set."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    from mai.flows import fanout, shard

    seen: dict[str, list[int | None]] = {"parent": [], "shard": []}
    original_shards, original_shard = fanout.run_shards, shard.run_shard

    def parent(*args: Any) -> Any:
        seen["parent"].append(get_current_settings().flows.heartbeat_frequency)
        return original_shards(*args)

    def one_shard(*args: Any) -> Any:
        seen["shard"].append(get_current_settings().flows.heartbeat_frequency)
        return original_shard(*args)

    monkeypatch.setattr("mai.flows.run.run_shards", parent)
    monkeypatch.setattr(shard, "run_shard", one_shard)
    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 60}):
        run(home, flow=True, limit=8)
        assert get_current_settings().flows.heartbeat_frequency == 60
    assert seen == {"parent": [60], "shard": [None, None]}
