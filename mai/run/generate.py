"""Generating one stage over one shard. The Parquet store is the one cache: only identities it lacks are
generated, and each of them once across every run and worker on the store (storage/claims.py)."""

from __future__ import annotations

import time
from typing import NamedTuple

from mai import cascade, progress, stop
from mai.backends.registry import get_engine
from mai.evals.registry import get_benchmark
from mai.host import host_name
from mai.pipeline import Log
from mai.provenance import hardware
from mai.run.answers import load_stage_answers
from mai.run.jobs import StageJob
from mai.stages import build_requests
from mai.storage.claims import ClaimBoard, compute_once
from mai.storage.generations import shared_store
from mai.storage.paths import Home
from mai.storage.samples import read_shard
from mai.storage.stored import stored_among
from mai.types import GenRequest, GenResult, Sample, StageAnswer, StageName


class StepResult(NamedTuple):
    outputs: dict[str, str]   # sample_id -> output id (gen_id, or selection_id) for every sample the step answers
    computed: int             # how many outputs (or captures) this step computed; 0: all were stored


def step_inputs(job: StageJob) -> tuple[list[Sample], dict[StageName, dict[str, StageAnswer]]]:
    """The shard's usable samples that this step must answer, and the earlier steps' answers."""
    ctx = job.plan
    benchmark = get_benchmark(ctx.benchmark)
    home = Home.at(ctx.home)  # on a worker: where this host mounts the store, images included
    samples = [s for s in read_shard(home.root / job.shard_path, home.images) if s.error is None]
    answers = load_stage_answers(shared_store(ctx.home), benchmark, samples, job.earlier, ctx.stages, ctx.models)
    return cascade.samples_needing(job.stage, ctx.config.mode, samples, answers, benchmark), answers


def generate_outputs(job: StageJob, log: Log) -> StepResult:
    """sample_id -> gen_id for every sample of the shard that this stage answers, and how many it generated; what
    the step decided goes to `log` (the step task's run logger: the Prefect UI)."""
    ctx = job.plan
    model, kind = ctx.models[job.stage.role], job.stage.prompt_kind
    todo, answers = step_inputs(job)
    upstream = answers.get(job.stage.upstream, {}) if job.stage.upstream else {}
    requests = build_requests(job.stage, todo, get_benchmark(ctx.benchmark), model, job.decoding, upstream,
                              ctx.backend_ids.get(job.stage.role))
    by_id = {r.gen_id: r for r in requests}  # identical samples generate once
    computed: list[str] = []

    def compute(gen_ids: list[str]) -> None:
        computed.extend(gen_ids)
        _generate(job, [by_id[g] for g in gen_ids])

    board = ClaimBoard(Home.at(ctx.home), f"generations/{model.slug}/{kind}")
    compute_once(board, by_id, lambda ids: stored_among(ctx.home, model, kind, ids), compute)
    _log_step(log, job, len(todo), len(by_id), len(computed))
    return StepResult({r.sample_id: r.gen_id for r in requests}, len(computed))


def _log_step(log: Log, job: StageJob, samples: int, outputs: int, computed: int) -> None:
    if not samples:
        log.info("%s: no sample of the shard reaches this stage", job.label)
    elif not computed:
        log.info("%s: all %d outputs are stored (by this or another run): nothing to compute", job.label, outputs)
    else:
        log.info("%s: %d of %d outputs computed, %d reused from the store", job.label, computed, outputs,
                 outputs - computed)


def _generate(job: StageJob, pending: list[GenRequest]) -> None:
    ctx = job.plan
    stop.check()  # no new stage starts after a stop request (the engines check between batches and steps)
    store, model = shared_store(ctx.home), ctx.models[job.stage.role]
    by_id = {r.gen_id: r for r in pending}
    # the machine each row was timed on (a fanned-out run computes on several): named at the step's first batch,
    # once the engine has loaded its model library (its GPUs are then known: mai.provenance.hardware)
    named: list[tuple[str, str]] = []
    progress.stage_started(job.stage.name, len(pending), run_id=ctx.run_id)

    def persist(batch: list[GenResult]) -> None:
        if not named:
            named.append((host_name(), hardware()))
        host, machine = named[0]
        store.write(model, job.stage.prompt_kind, by_id, batch,
                    {"benchmark": ctx.benchmark, "backend": ctx.backends[job.stage.role], "run_id": ctx.run_id,
                     "host": host, "hardware": machine})
        # the batch's engine time is its slowest row's (rows of a batch start together)
        progress.count(job.ledger, generations=len(batch), generate_s=max(r.wall_s for r in batch))
        progress.advanced(job.stage.name, len(batch), run_id=ctx.run_id)

    engine = get_engine(model, ctx.config.backend, ctx.engine_options(job.stage.role))
    loaded_before = engine.counters.load_s
    started = time.perf_counter()
    engine.generate(by_prompt_size(pending), ctx.config.batch_for(job.stage.prompt_kind), on_batch=persist)
    if not loaded_before and engine.counters.load_s:  # this call loaded the model
        progress.count(job.ledger, load_s=min(engine.counters.load_s, time.perf_counter() - started))


def by_prompt_size(requests: list[GenRequest]) -> list[GenRequest]:
    """Requests ordered by prompt size (images, then characters), so that a batch holds prompts of similar length
    and left padding wastes little prefill: an RT prompt carries the whole reasoning, from a few words to the
    budget. Order never changes an output (float32 greedy is batch-invariant; tests/test_speedup.py)."""
    return sorted(requests, key=lambda r: (len(r.prompt.image_paths), len(r.prompt.text)))
