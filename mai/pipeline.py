"""The run, written once: plan -> materialise -> resolve identities -> compute what is missing -> route and score
-> finish, over an executor.

The pipeline does not know where shards compute. The command chooses the executor: in this process with no Prefect
(mai/run/shard.py `InProcessShards`: a run with nothing to compute, `mai run --local`, a notebook), a Prefect flow
in this process (the default of `mai run`, so the run shows in the UI), or a Prefect work pool (`--workers`;
flows/run.py). Each runs the same shard steps (mai/run/shard.py). What the steps read and write is the store's (`RunSteps`,
implemented over the store by mai.run.steps); what the run logs goes to the logger it is given.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from mai.evals.loading import DataSource
from mai.manifest import RunManifest, RunScores, ShardOutcome, StageMaps
from mai.plan import RunPlan

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


@dataclass(frozen=True)
class ShardsDone:
    """Every shard's outcome, and the hosts taken out of the run: host -> why, with the fix (one line)."""

    outcomes: dict[str, ShardOutcome]
    hosts_taken_out: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Materialised:
    """A run's sample shards (relative to the store root), and its data source as materialising found it: its
    fingerprint names every file the samples read (mai/evals/files_read.py), known only once they are read."""

    shard_paths: list[str]
    source: DataSource


class RunSteps(Protocol):
    """What the pipeline asks of the store (each step computes nothing the store holds)."""

    def materialise(self, plan: RunPlan) -> Materialised:
        """The run's shard files, materialised if the store lacks them, and its data source's whole identity."""

    def check_prompts(self, plan: RunPlan, shard_paths: list[str]) -> list[str]:
        """The shards the run uses: a sample whose prompt does not fit a model becomes an error sample."""

    def resolve_identities(self, plan: RunPlan, shard_paths: list[str]) -> dict[str, ShardOutcome]:
        """The outcomes of the shards whose every output the store holds (the others are left out)."""

    def route_and_score(self, plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]
                        ) -> RunScores:
        """Writes the run's routes, scores and metrics."""

    def finish(self, plan: RunPlan, done: ShardsDone, scores: RunScores, phases: Phases) -> RunManifest:
        """Writes the manifest and the runs row (last), the catalog; logs and publishes the run's result."""


class Executor(Protocol):
    """Where the shards that lack outputs compute."""

    def compute(self, plan: RunPlan, todo: list[str], done_before: int, total: int) -> ShardsDone:
        """Every shard of `todo` computed (its missing outputs stored); `done_before` of `total` were stored."""


@dataclass(frozen=True)
class Resolved:
    """A run's shards after its identities are resolved against the store: the plan with its data source's whole
    identity (what every later step reads), the stored shards' outcomes and the shards that lack an output (the
    to-do list)."""

    plan: RunPlan
    shard_paths: list[str]
    stored: dict[str, ShardOutcome]
    todo: list[str]
    phases: Phases


def resolve(plan: RunPlan, steps: RunSteps, phases: Phases | None = None) -> Resolved:
    """Plan -> materialise -> resolve identities: which shards the store answers whole, and what is left to do.
    `phases`: the run's clock when it started before this (a flow that made its plan)."""
    phases = phases or Phases()
    materialised = steps.materialise(plan)
    plan = plan.model_copy(update={"source": materialised.source})
    shard_paths = steps.check_prompts(plan, materialised.shard_paths)
    phases.end("materialize_s")
    stored = steps.resolve_identities(plan, shard_paths)
    phases.end("shards_s")
    return Resolved(plan, shard_paths, stored, [shard for shard in shard_paths if shard not in stored], phases)


def complete(resolved: Resolved, steps: RunSteps, executor: Executor, log: Log) -> RunManifest:
    """Compute what is missing (on `executor`), then route, score and finish the run."""
    plan, phases = resolved.plan, resolved.phases
    if resolved.stored and resolved.todo:
        log.info("%d of %d shard(s) answered from the store: every step's outputs are stored (by this or another "
                 "run), so they have no shard flow run or task runs", len(resolved.stored), len(resolved.shard_paths))
    elif not resolved.todo:
        log.info("run %s: every step's outputs are stored (by this or another run): routed and scored from the "
                 "store, nothing computed", plan.run_id)
    ran = executor.compute(plan, resolved.todo, len(resolved.stored), len(resolved.shard_paths))
    outcomes = {**resolved.stored, **ran.outcomes}
    done = ShardsDone({shard: outcomes[shard] for shard in resolved.shard_paths}, ran.hosts_taken_out)
    phases.end("shards_s")  # the lookup and the computing
    scores = steps.route_and_score(plan, resolved.shard_paths, {s: o.stage_maps for s, o in done.outcomes.items()})
    phases.end("route_and_score_s")
    return steps.finish(plan, done, scores, phases)


def run_pipeline(plan: RunPlan, steps: RunSteps, executor: Executor, log: Log, phases: Phases | None = None
                 ) -> RunManifest:
    """The whole run on one executor (`phases`: as `resolve`)."""
    return complete(resolve(plan, steps, phases), steps, executor, log)


class Phases:
    """Where a run's wall time goes (plan, materialise, shards, routing and scoring, manifest), from its start."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started, self.started_at = time.perf_counter(), datetime.now(UTC)
        self._last = self.started

    def end(self, name: str) -> None:
        """Ends phase `name` now (a phase that ran twice, such as the lookup and the computing of shards, adds)."""
        now = time.perf_counter()
        self.seconds[name], self._last = self.seconds.get(name, 0.0) + now - self._last, now
