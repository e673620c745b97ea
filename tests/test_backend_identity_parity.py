"""Outside float32 a generation's identity names its backend and version (vLLM and transformers, or two versions,
give other bfloat16 outputs: a run must never reuse another backend's), float32 identities are exactly what they
were; `mai parity RUN_A RUN_B` reports the share of identical outputs and the score difference of two runs, here two
transformers batch sizes in two stores (float32: identical; bfloat16: whatever they are)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from mai.flows.cli import main
from mai.flows.plan import prepare_run
from mai.storage.paths import Home
from mai.tasks.jobs import StageJob

from mai.cascade import S_LARGE
from mai.config import RunConfig
from mai.identity import generation_id
from mai.types import Decoding, ModelSpec
from tests.test_flow_cascade import run

MODEL = ModelSpec("/models/mai-tiny-large", revision="sha256:1", local=True)
ARGS = {"template": "S/phrase@v1", "benchmark": "demo", "benchmark_version": "1", "decoding": Decoding(8),
        "sample_hash": "h1", "upstream": ("u",)}
# this request's identity as every earlier version computed it: float32 identities must never change
FLOAT32_ID = "f01ebe2f73a58772f0c3a5033802a79fc860c3586670b25558c2d434e272bc47"


def test_float32_identities_are_unchanged_and_ignore_the_backend() -> None:
    assert generation_id(model=MODEL, **ARGS) == FLOAT32_ID  # type: ignore[arg-type]
    assert generation_id(model=MODEL, backend="vllm 0.33.0", **ARGS) == FLOAT32_ID  # type: ignore[arg-type]


def test_bfloat16_identities_name_the_backend_and_its_version() -> None:
    bf16 = replace(MODEL, dtype="bfloat16")
    with pytest.raises(ValueError, match="needs its backend"):
        generation_id(model=bf16, **ARGS)  # type: ignore[arg-type]
    ids = {backend: generation_id(model=bf16, backend=backend, **ARGS)  # type: ignore[arg-type]
           for backend in ("transformers 5.23.0 torch 2.13.0", "transformers 5.24.0 torch 2.13.0", "vllm 0.33.0")}
    assert len(set(ids.values())) == 3 and FLOAT32_ID not in ids.values()


def test_a_bfloat16_plan_carries_its_backend_into_identities_and_cache_keys(home: Path) -> None:
    from importlib import metadata

    plan = prepare_run(RunConfig(home=str(home), dtype="bfloat16"), Home.at(home))
    expected = f"transformers {metadata.version('transformers')} torch {metadata.version('torch')}"
    assert plan.backend_ids == {"small": expected, "large": expected}
    assert prepare_run(RunConfig(home=str(home)), Home.at(home)).backend_ids == {}
    job = StageJob(plan=plan, shard_path="s", stage=S_LARGE, decoding=Decoding(8), earlier={})
    other = job.model_copy(update={"plan": plan.model_copy(update={"backend_ids": {"large": "vllm 0.33.0"}})})
    assert job.cache_key() != other.cache_key()  # Prefect's task cache never hands one backend's outputs to another


def second_store(tmp_path: Path, assets_home: Path) -> Path:
    root = tmp_path / "home-b"
    shutil.copytree(assets_home / "models", root / "models")
    shutil.copytree(assets_home / "datasets", root / "datasets")
    return root


def parity(home: Path, run_a: str, run_b: str, home_b: Path | None, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    extra = ["--home-b", str(home_b)] if home_b else []
    assert main(["--home", str(home), "parity", run_a, run_b, *extra, "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_parity_between_transformers_batch_sizes(home: Path, tmp_path: Path, assets_home: Path, dtype: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    other = second_store(tmp_path, assets_home)
    one = run(home, limit=8, shards=1, batch_size=1, dtype=dtype)
    eight = run(other, limit=8, shards=1, batch_size=8, dtype=dtype)
    result = parity(home, one["run_id"], eight["run_id"], other, capsys)
    assert result["samples_paired"] == 8 and result["shared_identity"] == 0  # two stores: computed twice
    paired = result["outputs_paired"]
    assert isinstance(paired, int) and paired >= 16  # at least both MV1 outputs of every sample
    if dtype == "float32":  # batched == unbatched greedy in float32 (tests/test_speedup.py)
        assert result["outputs_identical"] == paired and result["score_difference"] == 0.0
        assert result["final_answer_agreement"] == 1.0
    else:
        share = result["identical_share"]
        assert isinstance(share, float) and 0.0 <= share <= 1.0

    # the same configuration again in one store reuses every output: parity by construction, and it says so
    again = run(home, limit=8, shards=1, batch_size=8, dtype=dtype)
    same = parity(home, one["run_id"], again["run_id"], None, capsys)
    assert same["shared_identity"] == same["outputs_paired"] == same["outputs_identical"]
    assert main(["--home", str(home), "parity", one["run_id"], again["run_id"]]) == 0
    assert "one stored output shared by both runs" in capsys.readouterr().out


def test_parity_of_an_unknown_run_is_a_clear_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "parity", "nope-a", "nope-b"]) == 2
    assert "no completed run 'nope-a'" in capsys.readouterr().err


