"""What a run builds of the built-in assets on a fresh store (mai/run/assets.py): the models it runs, and nothing
else. A single-model run of a shipped model built the random tiny pair before (importing transformers to do so
while it planned: 20 s of a 43 s command at load 9 in the comparison with lmms-eval)."""

from __future__ import annotations

from pathlib import Path

from mai.config import LARGE_BUILTIN, SHAPES_LARGE, RunConfig, models_used
from mai.run.assets import ensure_builtin_assets
from mai.storage.paths import Home


def test_a_single_run_of_a_shipped_model_builds_no_tiny_pair(tmp_path: Path) -> None:
    home = Home.at(tmp_path)
    config = RunConfig(home=str(tmp_path), mode="single", single_model="large", large_model=SHAPES_LARGE, limit=2)
    assert models_used(config.model_dump()) == [SHAPES_LARGE]
    ensure_builtin_assets(config, home)
    assert not home.models.exists() or not any(home.models.iterdir())
    assert (home.datasets / "demo").is_dir()  # what it does run over is built


def test_the_models_a_configuration_runs() -> None:
    assert models_used({}) == [RunConfig().small_model, LARGE_BUILTIN]
    assert models_used({"mode": "single", "single_model": "small", "small_model": "a", "large_model": "b"}) == ["a"]
    assert models_used({"mode": "full_rt", "small_model": "a", "large_model": "b"}) == ["a", "b"]
