"""The speculative-decoding baseline of paper table 12, on any executor (the `mai-speculative` flow,
flows/speculative.py, or this process: `mai speculative --local`). The large model's plain R run (computed or
reused, by the executor's run) is the reference; every sample is decoded again with the small model drafting, and
the call records whether the tokens are identical, the acceptance rate and both times (batch size 1).

Rows are written every `batch_size` samples (one atomic file each, `k<K>-<id>.parquet`), so a killed or stopped
call keeps what it measured; the same call again measures only the samples of the reference run that no file of
its draft length holds yet. Progress: a `speculative` bar (mai.progress events)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TypedDict, cast

from mai import cascade, progress
from mai.backends.registry import get_engine
from mai.backends.speculative import speculative_generate
from mai.backends.transformers_backend import TransformersEngine
from mai.config import RunConfig
from mai.errors import ConfigError
from mai.evals.registry import get_benchmark
from mai.manifest import RunManifest
from mai.plan import RunPlan
from mai.stages import build_request
from mai.storage.catalog import build_catalog
from mai.storage.generations import shared_store
from mai.storage.parquet import read_rows, write_rows
from mai.storage.paths import Home
from mai.storage.rows import SpeculativeRow
from mai.storage.runs import is_complete, read_manifest, read_routes
from mai.storage.samples import read_shard
from mai.types import GenRequest, ModelSpec


class SpeculativeSummary(TypedDict):
    """What a call measured over every sample of the reference run (the CLI prints it)."""

    run_id: str
    samples: int
    draft_tokens: int
    identical: int
    acceptance_rate: float
    speculative_s: float
    plain_s: float


def pair_config(config: RunConfig) -> RunConfig:
    """The model pair whose small model drafts for its large one: the configuration's cascade, without S2."""
    return config.model_copy(update={"mode": "cascade", "s2": False})


def speculative_baseline(config: RunConfig, draft_tokens: int, plan: RunPlan,
                         run_reference: Callable[[RunConfig], RunManifest]) -> SpeculativeSummary:
    """`plan`: the pair's (`pair_config(config)`, validated and resolved); `run_reference` runs the reference
    configuration on the caller's executor, when no unfinished measurement of it is stored."""
    if config.backend != "transformers":
        raise ConfigError("the speculative-decoding baseline runs on the transformers backend")
    reference = config.model_copy(update={"mode": "single", "single_model": "large", "single_prompt": "R", "s2": False,
                                          "transfer": "full", "transfer_layer": None, "capture_layers": []})
    home = Home.at(config.home)
    models = plan.models
    run_id = _unfinished_reference(home, reference.key(), models["large"], models["small"], draft_tokens)
    run_id = run_id or run_reference(reference)["run_id"]
    large, small = (get_engine(models[r], "transformers") for r in ("large", "small"))
    if not (isinstance(large, TransformersEngine) and isinstance(small, TransformersEngine)):
        raise ConfigError("speculative decoding needs transformers engines")
    rows = _decode_all(home, run_id, reference, large, small, draft_tokens, config.batch_size,
                       plan.backend_ids.get("large"))
    build_catalog(home)
    proposed, accepted = sum(r["proposed"] for r in rows), sum(r["accepted"] for r in rows)
    return {"run_id": run_id, "samples": len(rows), "draft_tokens": draft_tokens,
            "identical": sum(r["identical_to_greedy"] for r in rows), "acceptance_rate": accepted / proposed if proposed else 0.0,
            "speculative_s": sum(r["speculative_wall_s"] for r in rows), "plain_s": sum(r["plain_wall_s"] for r in rows)}


def _unfinished_reference(home: Home, reference_key: str, large: ModelSpec, small: ModelSpec, k: int) -> str | None:
    """The run id of the latest completed reference run (same configuration, same large model) whose measurement
    with this small model and draft length was interrupted: the call resumes it instead of starting anew."""
    directories = sorted(home.table_dir("speculative").glob("*"), reverse=True) if home.table_dir("speculative").exists() else []
    for directory in directories:  # run ids start with their UTC start time: the latest first
        if not is_complete(home, directory.name):
            continue
        manifest = read_manifest(home, directory.name)
        if manifest.get("config_key") != reference_key or manifest["models"].get("large") != asdict(large):
            continue
        rows = stored_rows(directory, k)
        if rows and {r["small_model"] for r in rows} == {small.identity_name} \
                and len({r["sample_id"] for r in rows}) < manifest["counts"]["valid"]:
            return manifest["run_id"]
    return None


def stored_rows(directory: Path, k: int) -> list[SpeculativeRow]:
    """Rows already measured for draft length `k` (batch files, and the one whole file older versions wrote)."""
    rows = read_rows(sorted([*directory.glob(f"k{k}.parquet"), *directory.glob(f"k{k}-*.parquet")]))
    return cast(list[SpeculativeRow], rows)  # every file here is written with the speculative table's schema


def _decode_all(home: Home, run_id: str, config: RunConfig, large: TransformersEngine, small: TransformersEngine,
                k: int, batch_size: int, backend: str | None) -> list[SpeculativeRow]:
    benchmark = get_benchmark(config.benchmark)
    samples = {s.sample_id: s for path in read_manifest(home, run_id)["shard_paths"]
               for s in read_shard(home.root / path)}
    directory = home.table_dir("speculative") / run_id
    rows = stored_rows(directory, k)
    done = {r["sample_id"] for r in rows}
    routes = [r for r in read_routes(home, run_id) if r["route"] != "ERROR" and r["sample_id"] not in done]
    stored = shared_store(str(home.root)).read(large.model, "R", (r["gen_single"] for r in routes), ["output_token_ids"])
    stage, decoding = cascade.single_stages("large", "R", s2=False)[0], config.decoding("R")
    progress.stage_started("speculative", len(routes), run_id=run_id)
    batch: list[SpeculativeRow] = []
    for index, route in enumerate(routes):
        request = build_request(stage, samples[route["sample_id"]], benchmark, large.model, decoding, None, backend)
        greedy = stored[request.gen_id]["output_token_ids"]
        batch.append(_decode_one(route["sample_id"], greedy, large, small, k, run_id, request))
        progress.advanced("speculative", 1, run_id=run_id)
        if len(batch) >= batch_size or index == len(routes) - 1:
            write_rows(directory / f"k{k}-{uuid.uuid4().hex[:12]}.parquet", batch, "speculative")  # atomic
            rows, batch = rows + batch, []
    return rows


def _decode_one(sample_id: str, greedy: Sequence[int], large: TransformersEngine, small: TransformersEngine,
                k: int, run_id: str, request: GenRequest) -> SpeculativeRow:
    """`greedy`: the large model's stored output tokens for the request, which speculative decoding must equal."""
    result = speculative_generate(large, small, request, k)
    started = time.perf_counter()
    large.generate([request], batch_size=1)
    plain = time.perf_counter() - started
    return {"run_id": run_id, "sample_id": sample_id, "gen_id": request.gen_id,
            "large_model": large.model.identity_name, "small_model": small.model.identity_name,
            "draft_tokens": k, "proposed": result.proposed, "accepted": result.accepted,
            "acceptance_rate": result.acceptance_rate, "rounds": result.rounds,
            "output_tokens": len(result.token_ids) + (result.finish_reason == "stop"),
            "identical_to_greedy": list(result.token_ids) == list(greedy),
            "speculative_wall_s": result.wall_s, "plain_wall_s": plain}
