"""Sparse reasoning transfer: exact capture, token selection, layer sweeps without recomputation, table 9."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mai import api
from mai.backends.registry import get_engine
from mai.backends.transformers_capture import capture_inputs
from mai.config import resolve_model
from mai.errors import ConfigError
from mai.flows.sweep import mai_sweep
from mai.storage.catalog import query
from mai.storage.paths import Home
from mai.transfer import select_indices, tokens_to_reach
from mai.types import REASONING_MARK, CaptureRequest, ChatPrompt
from tests.helpers import BUDGET, run
from tests.test_transformers_backend import requests as demo_requests


def test_selection_keeps_the_heaviest_tokens_in_their_original_order() -> None:
    weights = [0.05, 0.4, 0.1, 0.3, 0.15]
    assert select_indices(weights, 0.8) == [1, 3, 4]  # 0.4 + 0.3 + 0.15 = 0.85 >= 0.8
    assert select_indices(weights, 0.7) == [1, 3]     # exactly reaching delta is enough
    assert select_indices(weights, 1.0) == [0, 1, 2, 3, 4]
    assert select_indices([0.0, 0.0], 0.8) == [] and tokens_to_reach(weights, 0.5) == 2
    with pytest.raises(ValueError):
        select_indices(weights, 0.0)


def test_capture_equals_eager_attention_on_padded_batches(home: Path) -> None:
    from transformers import AutoModelForImageTextToText

    model = resolve_model("mai-tiny-large", "main", "float32", Home.at(home).models)
    engine = get_engine(model, "transformers")
    base = demo_requests(home, None)  # type: ignore[arg-type]
    captures = [CaptureRequest(f"c{i}", r.sample_id, ChatPrompt(r.prompt.text + f"\nReference: {REASONING_MARK}\nAnswer.",
                                                                r.prompt.image_paths),
                               tuple(engine.encode(" step" * (3 + 4 * i) + " so yes")))
                for i, r in enumerate(base[:4])]
    layers = set(range(engine.num_layers()))
    batched = {(c.capture_id, c.layer): c for c in engine.capture(captures, layers, batch_size=4)}
    eager = AutoModelForImageTextToText.from_pretrained(model.name_or_path, dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    loaded = engine.load()
    for request in captures:
        inputs, [(begin, end)] = capture_inputs([request], loaded, "cpu")
        with torch.no_grad():
            reference = eager(**inputs, output_attentions=True).attentions
        for layer in layers:
            expected = reference[layer][0, :, -1, begin:end]
            got = batched[(request.capture_id, layer)]
            assert len(got.weights) == end - begin == len(request.reasoning_ids)
            assert torch.allclose(torch.tensor(got.weights), expected.mean(dim=0), atol=1e-5)
            assert torch.allclose(torch.tensor(got.head_span_mass), expected.sum(dim=1), atol=1e-5)


@pytest.mark.prefect
def test_layer_sweep_after_a_full_run_computes_only_selection_and_rt(home: Path) -> None:
    from mai.config import RunConfig

    full = run(home)
    baseline = run(home, mode="single", single_model="large", single_prompt="S")
    rt_samples = full["routes"]["RT"]
    assert rt_samples > 0 and baseline["counts"]["generations_computed"] == 0
    config = RunConfig(home=str(home), limit=24, shards=2, batch_size=8, max_new_tokens=BUDGET)
    sweep = api.sweep(config, [1, 2, 3], local=True)  # in this process; the flow's sweep below finds it all stored
    for index, manifest in enumerate(sweep):
        counts = manifest["counts"]
        assert counts["generations_computed"] <= rt_samples  # identical samples may share an RT identity
        assert counts["engine_generations"] == counts["generations_computed"] > 0
        assert counts["selections_computed"] == rt_samples
        assert counts["attention_prefills"] == (rt_samples if index == 0 else 0)  # one prefill, all layers
        assert counts["attention_rows_computed"] == (3 * rt_samples if index == 0 else 0)
        assert manifest["routes"]["RT"] == rt_samples  # MV1/MV2 outcomes are reused, not recomputed
    kinds = query(Home.at(home), "SELECT DISTINCT g.prompt_kind FROM generations g JOIN runs r USING (run_id) "
                                 "WHERE r.transfer = 'sparse'")[1]
    assert kinds == [("RT",)]

    again = mai_sweep(config, layers=[1, 2, 3])
    assert all(m["counts"]["generations_computed"] == 0 and m["counts"]["selections_computed"] == 0
               and m["counts"]["attention_prefills"] == 0 for m in again)

    from mai.dashboards.saved import load_saved

    columns, rows = query(Home.at(home), load_saved("transfer_layer_sweep"))
    table = [dict(zip(columns, row)) for row in rows]
    settings = [(r["setting"], r["layer"]) for r in table]
    assert ("large S", None) in settings and ("full RT", None) in settings
    assert sorted(layer for setting, layer in settings if setting == "sparse RT") == [1, 1, 2, 2, 3, 3]
    for row in table:
        if row["setting"] == "sparse RT":
            assert row["mean_transferred_tokens"] <= row["mean_reasoning_tokens"]
            assert row["metric"] == "accuracy" and 0.0 <= row["value"] <= 1.0
    _, layers = query(Home.at(home), load_saved("attention_by_layer"))
    assert [r[1] for r in layers] == [1, 2, 3] and all(0 < r[3] <= 1.0 + 1e-6 for r in layers)
    _, top = query(Home.at(home), load_saved("top_reasoning_tokens"))
    assert top and top[0][2] == 1


def test_sparse_transfer_configuration_errors(home: Path) -> None:
    with pytest.raises(ConfigError, match="needs --transfer-layer"):
        run(home, transfer="sparse")
    with pytest.raises(ConfigError, match=r"layer\(s\) \[9\] do not exist"):
        run(home, transfer="sparse", transfer_layer=9)
    with pytest.raises(ConfigError, match="only with --transfer sparse"):
        run(home, transfer_layer=1)
