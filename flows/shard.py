"""`mai-shard`: every step of a run's plan over one shard of its samples, on whichever process runs it (the
parent's, or a drain's on a worker of the `mai-gpu` pool: flows/drain.py). Steps of one group (the two MV1
models) run concurrently; each step is the one generic step task, which computes only what the store lacks. The
shard hands its parent a file in the store (its stage maps and its own accounting), so where it ran makes no
difference to the run."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import cast

from mai.flows.prefect_progress import PrefectProgress
from mai.storage.claims import Lease, held_by_this_process
from mai.storage.paths import Home, plan_on_this_host
from mai.storage.runs import shard_lease_path, write_shard_outcome
from mai.tasks.step import run_step
from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from mai import cascade, progress, stop
from mai.backends.registry import loaded_engines
from mai.host import host_name
from mai.manifest import ShardOutcome, StageMaps
from mai.plan import RunPlan
from mai.run.jobs import StageJob, ledger_key
from mai.types import StageSpec


# prefect types `task_runner` as TaskRunner[PrefectFuture[Any]], which no runner instance matches (the future
# type is an invariant parameter): PrefectHQ/prefect#16938, the example in prefect's own docs fails the same way
@flow(name="mai-shard", task_runner=ThreadPoolTaskRunner(max_workers=2),  # type: ignore[arg-type]
      persist_result=False, retries=2, retry_delay_seconds=2)
def mai_shard(plan: RunPlan, shard_path: str) -> ShardOutcome:
    """Runs the plan's steps over `shard_path` and returns (and stores) its outcome. On a worker the shard is a
    subflow of a drain: SIGTERM (a Prefect cancellation of the drain) stops it within a decoding step."""
    with stop.on_sigterm():
        return _run_shard(plan_on_this_host(plan), shard_path)  # the store and checkpoints as this host sees them


def _run_shard(plan: RunPlan, shard_path: str) -> ShardOutcome:
    started = time.perf_counter()
    home = Home.at(plan.home)
    groups = cascade.stage_groups(plan.stages)
    lease = shard_lease_path(home, plan.run_id, shard_path)
    # first: whoever watches the shard sees it run; a drain (flows/drain.py) took the lease before running the shard
    # here as its subflow, which then does not take it again
    with nullcontext() if held_by_this_process(lease) else Lease(lease):
        listener = PrefectProgress(f"{plan.run_id} {shard_path}", len(groups), key="mai-shard-progress")
        progress.add_listener(listener, run_id=plan.run_id)
        loading_before = _seconds_loading()
        try:
            stage_maps = _run_steps(plan, shard_path, groups, listener)
            outcome = ShardOutcome(shard_path=shard_path, stage_maps=stage_maps,
                                   tally=progress.take_tally(ledger_key(plan.run_id, shard_path)),
                                   loaded_models=_loaded_since(loading_before),
                                   host=host_name(), pid=os.getpid(), worker_pid=os.getppid(),
                                   wall_s=time.perf_counter() - started)
            write_shard_outcome(home, plan.run_id, shard_path, outcome)
        finally:
            progress.remove_listener(listener)
    return outcome



def _seconds_loading() -> dict[int, float]:
    """Each engine of this process (by object) -> the seconds it has spent loading its model (or server) so far."""
    return {id(engine): engine.counters.load_s for engine in loaded_engines()}


def _loaded_since(before: dict[int, float]) -> list[str]:
    """The models this process loaded since `before` (a shard's loads: the registry keeps engines for later ones)."""
    return sorted(engine.model.identity_name for engine in loaded_engines()
                  if engine.counters.load_s > before.get(id(engine), 0.0))


def _run_steps(plan: RunPlan, shard_path: str, groups: list[list[StageSpec]], listener: PrefectProgress
               ) -> StageMaps:
    stage_maps: StageMaps = {}
    for index, group in enumerate(groups):
        listener.group_started(index)
        jobs = {stage.name: StageJob(plan=plan, shard_path=shard_path, stage=stage,
                                     decoding=plan.decodings[stage.prompt_kind], earlier=dict(stage_maps))
                for stage in group}
        futures = {name: run_step.submit(job) for name, job in jobs.items()}
        for name, future in futures.items():
            # a `Cached` step's state carries its outputs as a computing step's does
            stage_maps[name] = cast(dict[str, str], future.result())
    listener.finished()
    return stage_maps
