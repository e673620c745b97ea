"""One shard of a run: every step of the plan over the shard's samples, whatever runs it. The steps are the same
on every executor (mai/pipeline.py): in this process with no Prefect (`InProcessShards`, `mai run --local`), as a
`mai-shard` flow (flows/shard.py, which hands each step to Prefect as a task run), or as a subflow of a drain on a
worker of the `mai-gpu` pool (flows/drain.py). Only how a group of steps is submitted differs (`RunGroup`). The
shard hands its outcome to the store (its stage maps and its own accounting), so where it ran makes no difference
to the run."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mai import cascade, progress
from mai.backends.registry import loaded_engines
from mai.host import host_name
from mai.manifest import ShardOutcome, StageMaps
from mai.pipeline import Log, ShardsDone
from mai.plan import RunPlan
from mai.run.jobs import StageJob, ledger_key
from mai.storage.claims import Lease, held_by_this_process
from mai.storage.paths import Home
from mai.storage.runs import shard_lease_path, write_shard_outcome

if TYPE_CHECKING:
    from mai.run.generate import StepResult

# runs one group of steps (the two MV1 models run together) and returns each step's outputs (stage -> sample id ->
# output id)
RunGroup = Callable[[list[StageJob]], StageMaps]
# steps of one group at once: the MV1 group holds two (each engine serialises its own calls)
GROUP_THREADS = 2


class ShardListener(progress.ProgressListener, Protocol):
    """Who shows a shard's progress by stage group (a Prefect progress artifact)."""

    def group_started(self, index: int) -> None: ...
    def finished(self) -> None: ...


def compute_step(job: StageJob, log: Log) -> StepResult:
    """One step over one shard: a generation stage, or sparse RT's token selection; what it decided goes to `log`.
    The steps' modules are imported here, by a run that computes: a run whose outputs are all stored (the in-process
    executor with nothing to do) never loads them (the attention store imports pyarrow.dataset, which imports
    pandas: tests/test_startup_imports.py)."""
    from mai.run.generate import generate_outputs
    from mai.run.transfer import select_outputs

    return generate_outputs(job, log) if job.stage.generates else select_outputs(job)


def run_shard(plan: RunPlan, shard_path: str, run_group: RunGroup, listener: ShardListener | None = None
              ) -> ShardOutcome:
    """Runs the plan's steps over `shard_path`, each group through `run_group`, and returns (and stores) the
    shard's outcome. `plan`: as this host sees the store (storage/paths.py `plan_on_this_host`)."""
    started = time.perf_counter()
    home = Home.at(plan.home)
    groups = cascade.stage_groups(plan.stages)
    lease = shard_lease_path(home, plan.run_id, shard_path)
    # first: whoever watches the shard sees it run; a drain (flows/drain.py) took the lease before running the shard
    # as its subflow, which then does not take it again
    with nullcontext() if held_by_this_process(lease) else Lease(lease):
        if listener is not None:
            progress.add_listener(listener, run_id=plan.run_id)
        loading_before = {id(engine): engine.counters.load_s for engine in loaded_engines()}  # seconds so far
        try:
            stage_maps: StageMaps = {}
            for index, group in enumerate(groups):
                if listener is not None:
                    listener.group_started(index)
                stage_maps.update(run_group([
                    StageJob(plan=plan, shard_path=shard_path, stage=stage,
                             decoding=plan.decodings[stage.prompt_kind], earlier=dict(stage_maps))
                    for stage in group]))
            if listener is not None:
                listener.finished()
            outcome = ShardOutcome(shard_path=shard_path, stage_maps=stage_maps,
                                   tally=progress.take_tally(ledger_key(plan.run_id, shard_path)),
                                   loaded_models=_loaded_since(loading_before),
                                   host=host_name(), pid=os.getpid(), worker_pid=os.getppid(),
                                   wall_s=time.perf_counter() - started)
            write_shard_outcome(home, plan.run_id, shard_path, outcome)
        finally:
            if listener is not None:
                progress.remove_listener(listener)
    return outcome


def _loaded_since(before: dict[int, float]) -> list[str]:
    """The models this process loaded since `before` (a shard's loads: the registry keeps engines for later ones)."""
    return sorted(engine.model.identity_name for engine in loaded_engines()
                  if engine.counters.load_s > before.get(id(engine), 0.0))


@dataclass(frozen=True)
class InProcessShards:
    """The in-process executor: the shards that lack outputs compute here, one after another, the steps of a group
    on threads. No Prefect, no server, no API: a notebook, a test or `mai run --local`. The store, the claims and
    the outcomes are the same as on the other executors, so the run's outputs and routes are too."""

    log: Log

    def compute(self, plan: RunPlan, todo: list[str], done_before: int, total: int) -> ShardsDone:
        if not todo:
            return ShardsDone({})
        self.log.info("%d shard(s) in this process (no Prefect)", len(todo))
        progress.stage_started("shards", total, run_id=plan.run_id)
        progress.advanced("shards", done_before, run_id=plan.run_id)
        outcomes = {}
        for shard in todo:
            outcomes[shard] = run_shard(plan, shard, self._run_group)
            progress.advanced("shards", 1, run_id=plan.run_id)
        return ShardsDone(outcomes)

    def _run_group(self, jobs: list[StageJob]) -> StageMaps:
        if len(jobs) == 1:
            return {jobs[0].stage.name: compute_step(jobs[0], self.log).outputs}
        with ThreadPoolExecutor(max_workers=GROUP_THREADS, thread_name_prefix="mai-step") as pool:
            futures = {job.stage.name: pool.submit(compute_step, job, self.log) for job in jobs}
            return {name: future.result().outputs for name, future in futures.items()}
