"""`run_step`: the one task that runs any step of a plan (a generation stage, or sparse RT's token selection)
over one shard. The store is the one cache: the step computes only the outputs whose identities the store lacks
(storage/claims.py), and a step that computed nothing ends in a Completed state named `Cached`, so the Prefect UI
shows a stored step as cached. Prefect keeps no cache of its own for it (no cache key, no persisted result)."""

from __future__ import annotations

from prefect import State, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed

from mai.pipeline import Log
from mai.run.jobs import StageJob
from mai.run.shard import compute_step


@task(name="step", task_run_name="{job.label}", cache_policy=NO_CACHE, persist_result=False)
def run_step(job: StageJob) -> dict[str, str] | State[dict[str, str]]:
    """Sample_id -> output id (gen_id, or selection_id) for every sample of the shard the step answers; in a
    `Cached` state when every one of them was stored already."""
    return step_state(job, get_run_logger())


def step_state(job: StageJob, log: Log) -> dict[str, str] | State[dict[str, str]]:
    """The step's result, what it decided logged to `log`."""
    result = compute_step(job, log)
    if result.computed:
        return result.outputs
    return Completed(name="Cached", data=result.outputs, message="every output is stored: nothing computed")
