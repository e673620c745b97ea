"""`mai-shard`: every step of a run's plan over one shard of its samples (mai/run/shard.py), as a Prefect flow run on
whichever process runs it (the parent's, or a drain's on a worker of the `mai-gpu` pool: flows/drain.py). Each step
is a run of the one generic step task (tasks/step.py), which computes only what the store lacks; steps of one group
(the two MV1 models) run concurrently. The UI shows the shard's progress as an artifact."""

from __future__ import annotations

from typing import cast

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from mai import cascade, stop
from mai.flows.prefect_api import failing_fast_once_lost
from mai.flows.prefect_progress import PrefectProgress
from mai.manifest import ShardOutcome, StageMaps
from mai.plan import RunPlan
from mai.run.jobs import StageJob
from mai.run.shard import GROUP_THREADS, run_shard
from mai.storage.paths import plan_on_this_host
from mai.tasks.step import run_step


# prefect types `task_runner` as TaskRunner[PrefectFuture[Any]], which no runner instance matches (the future
# type is an invariant parameter): PrefectHQ/prefect#16938, the example in prefect's own docs fails the same way
@flow(name="mai-shard", task_runner=ThreadPoolTaskRunner(max_workers=GROUP_THREADS),  # type: ignore[arg-type]
      persist_result=False, retries=2, retry_delay_seconds=2)
def mai_shard(plan: RunPlan, shard_path: str) -> ShardOutcome:
    """Runs the plan's steps over `shard_path` and returns (and stores) its outcome. On a worker the shard is a
    subflow of a drain: SIGTERM (a Prefect cancellation of the drain) stops it within a decoding step."""
    with stop.on_sigterm(), failing_fast_once_lost():
        plan = plan_on_this_host(plan)  # the store and checkpoints as this host sees them
        listener = PrefectProgress(f"{plan.run_id} {shard_path}", len(cascade.stage_groups(plan.stages)),
                                   key="mai-shard-progress")
        return run_shard(plan, shard_path, _as_task_runs, listener)


def _as_task_runs(jobs: list[StageJob]) -> StageMaps:
    """Each step of a group as a task run, submitted together; a `Cached` step's state carries its outputs as a
    computing step's does."""
    futures = {job.stage.name: run_step.submit(job) for job in jobs}
    return {name: cast(dict[str, str], future.result()) for name, future in futures.items()}
