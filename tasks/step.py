"""`run_step`: the one task that runs any step of a plan (a generation stage, or sparse RT's token selection)
over one shard. The store is the primary cache; Prefect's task cache (explicit content key, a JSON map of ids)
is a second layer that skips even the store lookup, and is refreshed when the store lost what it remembers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mai.storage.attention import read_selections
from mai.storage.paths import Home
from mai.tasks.generate import generate_outputs, store_for
from mai.tasks.jobs import StageJob
from mai.tasks.transfer import select_outputs
from prefect import task
from prefect.context import TaskRunContext


def _cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    job: StageJob = parameters["job"]
    return f"step-{job.cache_key()}"


def _runner(job: StageJob) -> Callable[[StageJob], dict[str, str]]:
    return generate_outputs if job.stage.generates else select_outputs


@task(name="step", task_run_name="{job.label}", cache_key_fn=_cache_key, result_serializer="json",
      persist_result=True)
def run_step(job: StageJob) -> dict[str, str]:
    """Returns sample_id -> output id (gen_id, or selection_id) for every sample of the shard the step answers."""
    return _runner(job)(job)


def stored_fraction(job: StageJob, outputs: dict[str, str]) -> float:
    """Share of a step's outputs that the store holds (1.0 unless the store lost files)."""
    if not outputs:
        return 1.0
    ctx, model = job.plan, job.plan.models[job.stage.role]
    if job.stage.generates:
        existing = store_for(ctx.home).stored_among(model, job.stage.prompt_kind, list(outputs.values()))
    else:
        existing = set(read_selections(Home.at(ctx.home), model, outputs.values()))
    return sum(1 for g in outputs.values() if g in existing) / len(outputs)
