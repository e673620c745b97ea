"""`mai-speculative`: the speculative-decoding baseline of paper table 12. The large model's plain R run
(computed or reused) is the reference; every sample is decoded again with the small model drafting, and
the flow records whether the tokens are identical, the acceptance rate and both times (batch size 1)."""

from __future__ import annotations

import time
from typing import Any

from mai.flows.plan import prepare_run
from mai.flows.run import mai_run
from mai.storage.catalog import build_catalog
from mai.storage.parquet import write_rows
from mai.storage.paths import Home
from mai.storage.runs import read_manifest, read_routes
from mai.storage.samples import read_shard
from mai.storage.schemas import SPECULATIVE
from mai.tasks.generate import store_for
from prefect import flow

from mai.backends.registry import get_engine
from mai.backends.speculative import speculative_generate
from mai.backends.transformers_backend import TransformersEngine
from mai.benchmarks.registry import get_benchmark
from mai.config import RunConfig
from mai.errors import ConfigError
from mai.stages import build_request
from mai.types import StageSpec


@flow(name="mai-speculative", persist_result=False)
def mai_speculative(config: RunConfig, draft_tokens: int = 4) -> dict[str, Any]:
    if config.backend != "transformers":
        raise ConfigError("the speculative-decoding baseline runs on the transformers backend")
    reference = config.model_copy(update={"mode": "single", "single_model": "large", "single_prompt": "R", "s2": False,
                                          "transfer": "full", "transfer_layer": None, "capture_layers": []})
    plan = prepare_run(config.model_copy(update={"mode": "cascade", "s2": False}), Home.at(config.home))
    baseline = mai_run(reference)
    home = Home.at(config.home)
    large, small = (get_engine(plan.context.models[r], "transformers") for r in ("large", "small"))
    if not (isinstance(large, TransformersEngine) and isinstance(small, TransformersEngine)):
        raise ConfigError("speculative decoding needs transformers engines")
    rows = _decode_all(home, baseline, reference, large, small, draft_tokens)
    write_rows(home.speculative / baseline["run_id"] / f"k{draft_tokens}.parquet", rows, SPECULATIVE)
    build_catalog(home)
    proposed, accepted = sum(r["proposed"] for r in rows), sum(r["accepted"] for r in rows)
    return {"run_id": baseline["run_id"], "samples": len(rows), "draft_tokens": draft_tokens,
            "identical": sum(r["identical_to_greedy"] for r in rows), "acceptance_rate": accepted / proposed if proposed else 0.0,
            "speculative_s": sum(r["speculative_wall_s"] for r in rows), "plain_s": sum(r["plain_wall_s"] for r in rows)}


def _decode_all(home: Home, baseline: dict[str, Any], config: RunConfig, large: TransformersEngine,
                small: TransformersEngine, k: int) -> list[dict[str, Any]]:
    benchmark = get_benchmark(config.benchmark)
    samples = {s.sample_id: s for path in read_manifest(home, baseline["run_id"])["shard_paths"]
               for s in read_shard(home.root / path)}
    routes = [r for r in read_routes(home, baseline["run_id"]) if r["route"] != "ERROR"]
    stored = store_for(str(home.root)).read(large.model, "R", (r["gen_single"] for r in routes), ["output_token_ids"])
    stage, decoding = StageSpec("single", "large", "R"), config.decoding("R")
    rows = []
    for route in routes:
        request = build_request(stage, samples[route["sample_id"]], benchmark, large.model, decoding, None)
        result = speculative_generate(large, small, request, k)
        started = time.perf_counter()
        large.generate([request], batch_size=1)
        plain = time.perf_counter() - started
        rows.append({"run_id": baseline["run_id"], "sample_id": route["sample_id"], "gen_id": request.gen_id,
                     "large_model": large.model.identity_name, "small_model": small.model.identity_name,
                     "draft_tokens": k, "proposed": result.proposed, "accepted": result.accepted,
                     "acceptance_rate": result.acceptance_rate, "rounds": result.rounds,
                     "output_tokens": len(result.token_ids) + (result.finish_reason == "stop"),
                     "identical_to_greedy": list(result.token_ids) == list(stored[request.gen_id]["output_token_ids"]),
                     "speculative_wall_s": result.wall_s, "plain_wall_s": plain})
    return rows
