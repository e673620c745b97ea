"""The cascade's speed levers never change an output: per-kind batch sizes, the CPU compute thread
(mai/backends/compute.py), processed images reused across stages and models (mai/backends/processor.py), each model's
image + question prefill reused by its later prompts (mai/backends/prefix_kv.py) and batching by prompt size
(mai/run/generate.py `by_prompt_size`) give token-identical generations, the same routes and the same scores as batch 8 in the task threads; and at engine level, any order and
batch size of a request list gives the same tokens per request (float32 greedy is batch-invariant)."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.backends import compute, prefix_kv
from mai.backends.processor import PROCESSED_IMAGES
from mai.backends.registry import clear_engines, get_engine
from mai.cascade import RT_LARGE
from mai.config import SHAPES_BATCH_SIZES, shapes_pair_config
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS
from mai.evals.registry import get_benchmark
from mai.run.generate import by_prompt_size
from mai.run.plan import prepare_run
from mai.stages import build_requests
from mai.storage.catalog import query
from mai.storage.materialise import materialise_samples
from mai.storage.paths import Home
from mai.storage.samples import read_shard
from mai.types import StageAnswer

LIMIT = 40


def stored_tokens(home: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    _, rows = query(Home.at(home), "SELECT gen_id, text, output_token_ids FROM generations")
    return {gen_id: (text, tuple(tokens)) for gen_id, text, tokens in rows}


def stored(home: Path, sql: str) -> list[tuple[Any, ...]]:
    return sorted(query(Home.at(home), sql)[1])


# slow: it needs the session's shapes splits (200 MB, about 30 s of CPU to build), which the fast tier never builds
@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_cascade_outputs_are_token_identical_with_and_without_the_speed_levers(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast_config = shapes_pair_config(home=str(home), limit=LIMIT)
    assert fast_config.batch_sizes == SHAPES_BATCH_SIZES  # the shipped pair's per-kind sizes by default
    api.plan_run(fast_config)
    plain_home = tmp_path / "home-plain"
    for part in ("models", "datasets"):
        shutil.copytree(home / part, plain_home / part)

    hits_before = PROCESSED_IMAGES.hits
    fast = api.run(fast_config, progress=False, local=True)
    assert any(t.name.startswith("mai-compute") for t in threading.enumerate())  # the engines used the thread
    assert PROCESSED_IMAGES.hits - hits_before >= LIMIT  # each image processed once for both MV1 models at least

    clear_engines()
    monkeypatch.setenv("MAI_COMPUTE_THREAD", "off")

    def no_compute_thread() -> None:
        raise AssertionError("MAI_COMPUTE_THREAD=off must keep engine calls in the task threads")

    monkeypatch.setattr(compute, "_executor", no_compute_thread)
    monkeypatch.setattr(PROCESSED_IMAGES, "max_bytes", 0)  # each batch's images processed together, every time
    monkeypatch.setattr(prefix_kv, "PREFIX_CACHE_BYTES", 0)  # every prompt prefilled in full
    misses_before = PROCESSED_IMAGES.misses
    plain = api.run(shapes_pair_config(home=str(plain_home), limit=LIMIT, batch_size=8), progress=False, local=True)

    assert PROCESSED_IMAGES.misses == misses_before  # the plain run never went through the cache
    assert fast["routes"] == plain["routes"] and fast["routes"]["RT"] > 0  # every stage ran
    assert stored_tokens(home) == stored_tokens(plain_home)  # same gen_ids, texts and token ids
    assert len(stored_tokens(home)) >= 2 * LIMIT
    scores = "SELECT sample_id, parsed, score, final_gen_id FROM scores"
    assert stored(home, scores) == stored(plain_home, scores)
    sizes = "SELECT DISTINCT prompt_kind, batch_size FROM generations"
    assert max(size for _, size in stored(plain_home, sizes)) <= 8
    assert max(size for _, size in stored(home, sizes)) > 8  # the levers were really on in the first run
    continued = "SELECT prompt_kind, count(*) FILTER (cached_prompt_tokens > 0) FROM generations GROUP BY 1"
    assert {kind for kind, n in stored(home, continued) if n} == {"R", "RT"}  # both continued from MV1's S
    assert not any(n for _, n in stored(plain_home, continued))


@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_order_and_batch_size_never_change_an_engines_outputs(home: Path) -> None:
    """RT prompts carry upstream texts of very different lengths: the case where sorting by size regroups
    batches the most. Dataset order one at a time vs by size in one batch: the same tokens per request."""
    config = shapes_pair_config(home=str(home), limit=16)
    api.plan_run(config)
    plan = prepare_run(config, Home.at(home))
    benchmark = get_benchmark(config.benchmark)
    (shard,) = materialise_samples(Home.at(home), config.benchmark, plan.source, 1, config.limit,
                                   DEFAULT_MAX_IMAGE_PIXELS, logging.getLogger("mai")).shard_paths
    samples = [s for s in read_shard(Home.at(home).root / shard) if s.error is None]
    upstream = {s.sample_id: StageAnswer(gen_id=f"u{i}", text=" ".join(["there are two red shapes"] * (i % 7)),
                                         answer=None) for i, s in enumerate(samples)}
    model = plan.models["large"]
    requests = build_requests(RT_LARGE, samples, benchmark, model, plan.decodings["RT"], upstream,
                              plan.backend_ids["large"])
    assert len({len(r.prompt.text) for r in requests}) >= 5
    assert [r.gen_id for r in by_prompt_size(requests)] != [r.gen_id for r in requests]
    engine = get_engine(model, "transformers")
    one_by_one = {r.gen_id: r.token_ids for r in engine.generate(requests, batch_size=1)}
    by_size = {r.gen_id: r.token_ids for r in engine.generate(by_prompt_size(requests), batch_size=len(requests))}
    assert one_by_one == by_size


def test_batch_sizes_per_prompt_kind_from_the_pair_the_command_line_and_deployments() -> None:
    from mai.cli import _parser
    from mai.cli.options import run_config
    from mai.config import RunConfig
    from mai.errors import ConfigError
    from mai.flows.deployment import merge_config

    pair = ["--benchmark", "shapes", "--small-model", "mai-shapes-small", "--large-model", "mai-shapes-large"]

    def cli(*args: str) -> RunConfig:
        return run_config(_parser().parse_args(["run", *args]))

    tuned = cli(*pair)
    assert {kind: tuned.batch_for(kind) for kind in ("S", "R", "RT")} == {"S": 32, "R": 64, "RT": 32}
    every = cli(*pair, "--batch-size", "16")  # N sets every kind, the pair's sizes included
    assert {every.batch_for(kind) for kind in SHAPES_BATCH_SIZES} == {16}
    mixed = cli(*pair, "--batch-size", "16", "--batch-size", "R=48")
    assert (mixed.batch_for("S"), mixed.batch_for("R")) == (16, 48)
    one_kind = cli(*pair, "--batch-size", "RT=8")
    assert one_kind.batch_sizes == {**SHAPES_BATCH_SIZES, "RT": 8}
    assert {cli().batch_for(kind) for kind in SHAPES_BATCH_SIZES} == {8}  # other models: batch_size for every kind
    assert len({tuned.key(), every.key(), mixed.key(), cli(*pair, "--batch-size", "1").key()}) == 1  # same outputs
    with pytest.raises(ConfigError, match="KIND=N"):
        cli("--batch-size", "X=2")
    with pytest.raises(ValueError, match="unknown prompt kinds"):
        RunConfig(batch_sizes={"X": 2})
    deployment = {"benchmark": "shapes", "batch_sizes": {"S": 32, "R": 64}}
    assert merge_config(deployment, {"batch_sizes": {"R": 16}})["batch_sizes"] == {"S": 32, "R": 16}
    given_size = RunConfig(**merge_config({"benchmark": "shapes", "small_model": "mai-shapes-small",
                                           "large_model": "mai-shapes-large"}, {"batch_size": 4}))
    assert given_size.batch_for("R") == 4  # a run that names a batch size gets it for every kind
