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

from pydantic import BaseModel, ConfigDict

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

    def record_stored(self, plan: RunPlan, stored: dict[str, ShardOutcome]) -> None:
        """Keeps what `resolve_identities` found for the executor that completes the run (`hand_over`)."""

    def read_stored(self, plan: RunPlan) -> dict[str, ShardOutcome]:
        """What `record_stored` kept for the run."""

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


class PhasesSoFar(BaseModel):
    """A run's clock as the command that resolved the run hands it to the flow that completes it."""

    model_config = ConfigDict(frozen=True)

    seconds: dict[str, float]
    started_at: datetime
    handed_at: datetime


class HandedOver(BaseModel):
    """A resolution as a flow receives it (its parameter: small, whatever the run's size): the shards, the to-do
    list and the clock; the stored shards' outcomes are a record of the run in the store (`RunSteps.record_stored`),
    since their stage maps grow with the run."""

    model_config = ConfigDict(frozen=True)

    shard_paths: list[str]
    todo: list[str]
    phases: PhasesSoFar


def resolve(plan: RunPlan, steps: RunSteps, phases: Phases | None = None) -> Resolved:
    """Plan -> materialise -> resolve identities: which shards the store answers whole, and what is left to do.
    `phases`: the run's clock when it started before this (the plan was made on it)."""
    phases = phases or Phases()
    materialised = steps.materialise(plan)
    plan = plan.model_copy(update={"source": materialised.source})
    shard_paths = steps.check_prompts(plan, materialised.shard_paths)
    phases.end("materialize_s")
    stored = steps.resolve_identities(plan, shard_paths)
    phases.end("shards_s")
    return Resolved(plan, shard_paths, stored, [shard for shard in shard_paths if shard not in stored], phases)


def hand_over(resolved: Resolved, steps: RunSteps) -> HandedOver:
    """The resolution for an executor in a flow, so the flow does not resolve again (`take_over`)."""
    steps.record_stored(resolved.plan, resolved.stored)
    return HandedOver(shard_paths=resolved.shard_paths, todo=resolved.todo, phases=resolved.phases.so_far())


def take_over(plan: RunPlan, handed: HandedOver, steps: RunSteps) -> Resolved:
    """The resolution `hand_over` gave (`plan`: the resolved plan), on the clock it ran on: the seconds between the
    two (a temporary Prefect server's start, the flow run's creation) are the run's `handover_s`."""
    stored = steps.read_stored(plan)
    return Resolved(plan, handed.shard_paths, stored, handed.todo, Phases.resumed(handed.phases))


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


class Phases:
    """Where a run's wall time goes (plan, materialise, shards, routing and scoring, manifest), from its start."""

    def __init__(self, startup_s: float | None = None) -> None:
        """`startup_s`: the seconds the command took to start before this clock, a phase before the run's wall
        time (which stays the run's own, alike whether a command or a notebook started it)."""
        self.seconds: dict[str, float] = {} if startup_s is None else {"startup_s": startup_s}
        self.started, self.started_at = time.perf_counter(), datetime.now(UTC)
        self._last = self.started

    def so_far(self) -> PhasesSoFar:
        return PhasesSoFar(seconds=dict(self.seconds), started_at=self.started_at, handed_at=datetime.now(UTC))

    @classmethod
    def resumed(cls, so_far: PhasesSoFar) -> Phases:
        """The clock `so_far` handed over, running on in this process; the time since it was handed is
        `handover_s`."""
        phases, now = cls(), datetime.now(UTC)
        phases.started -= (now - so_far.started_at).total_seconds()
        phases.started_at = so_far.started_at
        phases.seconds = {**so_far.seconds, "handover_s": (now - so_far.handed_at).total_seconds()}
        return phases

    def end(self, name: str) -> None:
        """Ends phase `name` now (a phase that ran twice, such as the lookup and the computing of shards, adds)."""
        now = time.perf_counter()
        self.seconds[name], self._last = self.seconds.get(name, 0.0) + now - self._last, now
