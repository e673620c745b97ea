"""`generate_stage`: one cascade stage over one shard. The Parquet store is the primary cache: only
identities it lacks are generated. Prefect's task cache (explicit content key, JSON result of a few ids)
is a second layer that skips even the store lookup."""

from __future__ import annotations

from typing import Any

from mai.storage.generations import GenerationStore
from mai.storage.paths import Home
from mai.storage.samples import read_shard
from mai.tasks.answers import load_stage_answers
from mai.tasks.jobs import StageJob
from prefect import task
from prefect.context import TaskRunContext

from mai import cascade, progress
from mai.backends.registry import get_engine
from mai.benchmarks.registry import get_benchmark
from mai.stages import build_requests
from mai.types import GenResult, StageAnswer

_STORES: dict[str, GenerationStore] = {}


def store_for(home: str) -> GenerationStore:
    """One store object per root and process, so its index of known ids is shared by all tasks."""
    if home not in _STORES:
        _STORES[home] = GenerationStore(Home.at(home))
    return _STORES[home]


def _cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    job: StageJob = parameters["job"]
    return f"generate-stage-{job.cache_key()}"


@task(name="generate-stage", task_run_name="{job.stage.name}", cache_key_fn=_cache_key,
      result_serializer="json", persist_result=True)
def generate_stage(job: StageJob) -> dict[str, str]:
    """Returns sample_id -> gen_id for every sample of the shard that this stage answers."""
    ctx = job.context
    benchmark = get_benchmark(ctx.benchmark)
    store = store_for(ctx.home)
    model = ctx.models[job.stage.role]
    samples = [s for s in read_shard(Home.at(ctx.home).root / job.shard_path) if s.error is None]
    answers = load_stage_answers(store, benchmark, samples, job.earlier, ctx.stages, ctx.models)
    todo = cascade.samples_needing(job.stage, ctx.mode, samples, answers, benchmark)
    upstream = answers.get(job.stage.upstream, {}) if job.stage.upstream else {}
    if job.selections is not None:  # sparse RT: the selected tokens stand in for the whole reasoning
        upstream = _selected_reasoning(job)
    requests = build_requests(job.stage, todo, benchmark, model, job.decoding, upstream)
    missing = set(store.missing(model, job.stage.prompt_kind, (r.gen_id for r in requests)))
    by_id = {r.gen_id: r for r in requests if r.gen_id in missing}  # identical samples generate once
    pending = list(by_id.values())
    stage_label = job.stage.name
    progress.stage_started(stage_label, len(pending))

    def persist(batch: list[GenResult]) -> None:
        store.write(model, job.stage.prompt_kind, by_id, batch,
                    {"benchmark": ctx.benchmark, "backend": ctx.backend, "run_id": ctx.run_id})
        progress.advanced(stage_label, len(batch))

    if pending:
        get_engine(model, ctx.backend, ctx.engine_options(job.stage.role)).generate(pending, ctx.batch_size,
                                                                                    on_batch=persist)
    return {r.sample_id: r.gen_id for r in requests}


def _selected_reasoning(job: StageJob) -> dict[str, StageAnswer]:
    from mai.storage.attention import read_selections

    assert job.selections is not None
    rows = read_selections(Home.at(job.context.home), job.context.models["large"], job.selections.values())
    return {sid: StageAnswer(sel, rows[sel]["transferred_text"], None) for sid, sel in job.selections.items()}


def stored_fraction(job: StageJob, outputs: dict[str, str]) -> float:
    """Share of a stage's outputs that the store holds (1.0 unless the store lost files)."""
    if not outputs:
        return 1.0
    existing = store_for(job.context.home).existing_ids(job.context.models[job.stage.role], job.stage.prompt_kind)
    return sum(1 for g in outputs.values() if g in existing) / len(outputs)
