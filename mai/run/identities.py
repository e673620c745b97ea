"""The pipeline's "resolve identities" step (mai/pipeline.py): which shards the store answers whole, before any
Prefect task run or subflow is created for them.

A step's outputs are identities computed from the plan, the shard's samples and the earlier steps' stored answers
(mai.identity): the same values `run_step` returns (mai/run/generate.py, mai/run/transfer.py), without a model. So the
parent asks the store, stage by stage over ALL shards at once (one id lookup and one answer read per stage, not
per shard and step), which shards have every step stored; those shards need no `mai-shard` flow run, no `step`
task runs and none of their round trips to the Prefect API. A shard with any output missing goes through Prefect
as before, and computes only what is missing. Nothing here loads a model or imports a model library.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

from mai import cascade
from mai.evals.base import Benchmark
from mai.evals.registry import get_benchmark
from mai.host import host_name
from mai.manifest import ShardOutcome, StageMaps
from mai.plan import RunPlan
from mai.progress import Tally
from mai.prompts import template_id
from mai.run.answers import load_stage_answers
from mai.stages import build_requests
from mai.storage.generations import shared_store
from mai.storage.paths import Home
from mai.storage.samples import read_shard
from mai.storage.stored import stored_among
from mai.transfer import capture_id, selection_id
from mai.types import Sample, StageAnswer, StageName, StageSpec

Answers = dict[StageName, dict[str, StageAnswer]]


def resolve_identities(plan: RunPlan, shard_paths: Sequence[str]) -> dict[str, ShardOutcome]:
    """shard path -> its outcome, for the shards whose every step's outputs the store holds (stage maps equal to
    what their `mai-shard` flow would return; an empty tally: no engine ran). The other shards are left out."""
    started = time.perf_counter()
    benchmark = get_benchmark(plan.benchmark)
    home = Home.at(plan.home)
    shard_of: dict[str, str] = {}
    pool: list[Sample] = []  # the usable samples of the shards still answerable, in shard order
    for shard in shard_paths:
        for sample in read_shard(home.root / shard):
            if sample.error is None:
                shard_of[sample.sample_id] = shard
                pool.append(sample)
    answerable = set(shard_paths)
    outputs_by_stage: dict[StageName, dict[str, str]] = {}
    answers: Answers = {}
    for stage in plan.stages:
        outputs, stored = _stage_outputs(plan, benchmark, stage, pool, answers)
        answerable -= {shard_of[sid] for sid, output in outputs.items() if output not in stored}
        pool = [s for s in pool if shard_of[s.sample_id] in answerable]
        if not answerable:
            return {}
        kept = {sid: output for sid, output in outputs.items() if shard_of[sid] in answerable}
        outputs_by_stage[stage.name] = kept
        answers[stage.name] = load_stage_answers(shared_store(plan.home), benchmark, pool, {stage.name: kept},
                                                 [stage], plan.models)[stage.name]
    seconds = (time.perf_counter() - started) / len(answerable)
    return {shard: _outcome(shard, _maps_of(shard, outputs_by_stage, shard_of), seconds)
            for shard in shard_paths if shard in answerable}


def _stage_outputs(plan: RunPlan, benchmark: Benchmark, stage: StageSpec, pool: list[Sample], answers: Answers
                   ) -> tuple[dict[str, str], set[str]]:
    """sample_id -> the step's output id for the samples of `pool` that reach the stage, and which of those
    outputs the store holds (one lookup for every shard)."""
    todo = cascade.samples_needing(stage, plan.config.mode, pool, answers, benchmark)
    model = plan.models[stage.role]
    if not stage.generates:  # sparse RT's token selection
        outputs = selection_ids_of(plan, benchmark, todo, answers)
        return outputs, stored_among(plan.home, model, "selection", outputs.values())
    upstream = answers.get(stage.upstream, {}) if stage.upstream else {}
    requests = build_requests(stage, todo, benchmark, model, plan.decodings[stage.prompt_kind], upstream,
                              plan.backend_ids.get(stage.role))
    outputs = {r.sample_id: r.gen_id for r in requests}
    return outputs, stored_among(plan.home, model, stage.prompt_kind, outputs.values())


def _maps_of(shard: str, outputs_by_stage: dict[StageName, dict[str, str]], shard_of: dict[str, str]) -> StageMaps:
    return {name: {sid: output for sid, output in outputs.items() if shard_of[sid] == shard}
            for name, outputs in outputs_by_stage.items()}


def _outcome(shard: str, stage_maps: StageMaps, seconds: float) -> ShardOutcome:
    return ShardOutcome(shard_path=shard, stage_maps=stage_maps, tally=Tally(), host=host_name(),
                        pid=os.getpid(), worker_pid=os.getppid(), wall_s=seconds)


def capture_ids_of(plan: RunPlan, benchmark: Benchmark, todo: Sequence[Sample], reasoning: dict[str, str]
                   ) -> dict[str, str]:
    """sample_id -> the id of the large model's attention capture over the sample's small reasoning."""
    large = plan.models["large"]
    return {s.sample_id: capture_id(large, reasoning[s.sample_id], s.content_hash, _template(benchmark, s))
            for s in todo}


def selection_ids_of(plan: RunPlan, benchmark: Benchmark, todo: Sequence[Sample],
                     answers: Mapping[StageName, Mapping[str, StageAnswer]]) -> dict[str, str]:
    """sample_id -> the step's selection id for `todo`: identities only, nothing is read or computed (what
    `select_outputs` returns, for the parent's lookup of stored shards, mai/run/identities.py)."""
    reasoning = {s.sample_id: answers["r_small"][s.sample_id].gen_id for s in todo}
    return selection_ids_for(plan, capture_ids_of(plan, benchmark, todo, reasoning))


def selection_ids_for(plan: RunPlan, captures: Mapping[str, str]) -> dict[str, str]:
    """sample_id -> the selection id of its capture (`captures`: sample_id -> capture id) at the run's layer and
    delta: the one derivation, for the lookup here and for the step (mai/run/transfer.py)."""
    assert plan.config.transfer_layer is not None  # validated in the plan
    return {sid: selection_id(cid, plan.config.transfer_layer, plan.config.transfer_delta)
            for sid, cid in captures.items()}


def _template(benchmark: Benchmark, sample: Sample) -> str:
    return template_id("RT", benchmark.answer_style(sample), benchmark.rt_template(sample))
