"""Cascades with the tiny InternVL pair and mixed-family pairs end to end (the in-process executor, real DuckDB): routing
counts, a re-run computes nothing, a change of the maximum tile count (a processor setting of the checkpoint)
recomputes that model's outputs and nothing else, and a mixed pair reuses each model's own outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mai.config import INTERNVL_LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN, LARGE_BUILTIN, SMALL_BUILTIN
from mai.storage.paths import Home
from tests.helpers import run, stored_generations

# 12 demo samples a run (the tests' usual 24 computed twice the outputs): enough that each pair disagrees on some (every
# stage runs) and that a changed partner routes new samples to a model
LIMIT = 12


def set_max_tiles(directory: Path, max_tiles: int) -> None:
    """Change a checkpoint's maximum tile count (its processor setting) in place, as a user edits it."""
    for file in ("preprocessor_config.json", "processor_config.json"):
        path = directory / file
        config = json.loads(path.read_text())
        target = config.get("image_processor", config)
        target["max_patches"] = max_tiles
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def samples_of(home: Path, run_id: str, model: str, kind: str) -> set[str]:
    """Samples for which `run_id` computed a `kind` generation of `model` (read from the Parquet files)."""
    files = sorted(Home.at(home).generations.glob("*/*/*.parquet"))
    rows = [r for f in files for r in pq.read_table(f, columns=["run_id", "model", "prompt_kind", "sample_id"]).to_pylist()]
    return {r["sample_id"] for r in rows if (r["run_id"], r["model"], r["prompt_kind"]) == (run_id, model, kind)}


def assert_complete(manifest: dict[str, Any]) -> None:
    routes = manifest["routes"]
    assert manifest["counts"]["valid"] == LIMIT
    assert routes["MV1"] + routes["MV2"] + routes["RT"] == LIMIT
    assert manifest["stages"]["r_small"]["generations"] == LIMIT - routes["MV1"]
    assert manifest["stages"]["rt_large"]["generations"] == routes["RT"]


def test_internvl_pair_cascade_reruns_nothing_and_a_tile_change_recomputes(home: Path) -> None:
    pair = {"small_model": INTERNVL_SMALL_BUILTIN, "large_model": INTERNVL_LARGE_BUILTIN, "s2": True}
    first = run(home, limit=LIMIT, **pair)
    assert_complete(first)
    assert first["counts"]["generations_computed"] == first["counts"]["generations_needed"]
    assert first["routes"]["RT"] > 0  # the pair disagrees often enough that every stage runs

    again = run(home, limit=LIMIT, **pair)
    assert again["counts"]["generations_computed"] == 0
    assert again["routes"] == first["routes"] and again["metrics"] == first["metrics"]

    # one tile per image instead of up to six: the large model's processor changed, so its outputs are recomputed
    # (its identity is a fingerprint of its files); the small model's are reused (it computes R and S2 only for
    # samples that reach stage 2 now and did not before: the large model's new S answers route them differently)
    set_max_tiles(Home.at(home).models / INTERNVL_LARGE_BUILTIN, 1)
    retiled = run(home, limit=LIMIT, **pair)
    assert_complete(retiled)
    computed = stored_generations(home, retiled["run_id"])
    large = [r for r in computed if r["model"] == INTERNVL_LARGE_BUILTIN]
    assert sum(r["prompt_kind"] == "S" for r in large) == LIMIT
    assert {r["prompt_kind"] for r in computed if r["model"] == INTERNVL_SMALL_BUILTIN} <= {"R", "S2"}
    small_r = samples_of(home, retiled["run_id"], INTERNVL_SMALL_BUILTIN, "R")
    assert small_r.isdisjoint(samples_of(home, first["run_id"], INTERNVL_SMALL_BUILTIN, "R"))
    assert retiled["counts"]["generations_reused"] >= LIMIT  # at least the small model's S answers
    before = {r["gen_id"] for r in stored_generations(home, first["run_id"])}
    assert before.isdisjoint({r["gen_id"] for r in computed})


def test_internvl_mixed_family_pairs_reuse_each_models_outputs(home: Path) -> None:
    """InternVL small + Qwen large, then Qwen small + InternVL large: only text passes between the two models, and
    each model's outputs computed by an earlier pair are reused by the next (a model computes only what the new
    partner's answers route to it that it had not answered before)."""
    internvl_pair = run(home, limit=LIMIT, small_model=INTERNVL_SMALL_BUILTIN, large_model=INTERNVL_LARGE_BUILTIN)
    assert_complete(internvl_pair)

    mixed = run(home, limit=LIMIT, small_model=INTERNVL_SMALL_BUILTIN, large_model=LARGE_BUILTIN)
    assert_complete(mixed)
    computed = stored_generations(home, mixed["run_id"])
    assert sum(r["prompt_kind"] == "S" and r["model"] == LARGE_BUILTIN for r in computed) == LIMIT
    assert {r["prompt_kind"] for r in computed if r["model"] == INTERNVL_SMALL_BUILTIN} <= {"R"}  # S reused
    assert samples_of(home, mixed["run_id"], INTERNVL_SMALL_BUILTIN, "R").isdisjoint(
        samples_of(home, internvl_pair["run_id"], INTERNVL_SMALL_BUILTIN, "R"))
    assert mixed["routes"]["RT"] > 0  # the Qwen model read the InternVL model's reasoning

    reverse = run(home, limit=LIMIT, small_model=SMALL_BUILTIN, large_model=INTERNVL_LARGE_BUILTIN)
    assert_complete(reverse)
    computed = stored_generations(home, reverse["run_id"])
    assert sum(r["prompt_kind"] == "S" and r["model"] == SMALL_BUILTIN for r in computed) == LIMIT
    # the InternVL large model's S answers are reused; its RT reads the Qwen model's reasoning (new outputs)
    assert {r["prompt_kind"] for r in computed if r["model"] == INTERNVL_LARGE_BUILTIN} <= {"RT"}
    assert reverse["routes"]["RT"] > 0
    again = run(home, limit=LIMIT, small_model=SMALL_BUILTIN, large_model=INTERNVL_LARGE_BUILTIN)
    assert again["counts"]["generations_computed"] == 0 and again["routes"] == reverse["routes"]


def test_sparse_rt_on_an_internvl_large_model_behind_a_qwen_small_model(home: Path) -> None:
    """Sparse RT with an InternVL large model: its language model's layers are captured (0-based decoder layers),
    the selected tokens of the Qwen model's reasoning are transferred, and a second layer costs no new prefill."""
    pair = {"small_model": SMALL_BUILTIN, "large_model": INTERNVL_LARGE_BUILTIN}
    full = run(home, limit=LIMIT, **pair)
    rt_samples = full["routes"]["RT"]
    assert rt_samples > 0
    layer_3 = run(home, limit=LIMIT, **pair, transfer="sparse", transfer_layer=3)
    counts = layer_3["counts"]
    assert counts["selections_computed"] == rt_samples and counts["attention_prefills"] == rt_samples
    assert layer_3["routes"]["RT"] == rt_samples  # MV1 and MV2 outcomes are reused
    computed = stored_generations(home, layer_3["run_id"])
    assert {(r["model"], r["prompt_kind"]) for r in computed} == {(INTERNVL_LARGE_BUILTIN, "RT")}
    layer_0 = run(home, limit=LIMIT, **pair, transfer="sparse", transfer_layer=0)
    assert layer_0["counts"]["selections_computed"] == rt_samples
    assert layer_0["counts"]["attention_prefills"] == rt_samples  # a run captures only its own layer
