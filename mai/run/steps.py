"""The pipeline's steps over the store (mai/pipeline.py `RunSteps`), without Prefect: what a run with nothing to
compute runs in the command's process, and what the `mai-run` flow's tasks call (flows/run.py)."""

from __future__ import annotations

from dataclasses import dataclass

from mai.manifest import RunManifest, RunScores, ShardOutcome, StageMaps
from mai.pipeline import Log, Materialised, Phases, ShardsDone
from mai.plan import RunPlan
from mai.run.finish import Publish, finish_run
from mai.run.identities import resolve_identities
from mai.run.prompt_limits import checked_shards
from mai.run.routes import score_run
from mai.storage.materialise import materialise_samples
from mai.storage.paths import Home
from mai.storage.runs import read_stored_shards, write_stored_shards


@dataclass(frozen=True)
class StoreSteps:
    """Each step reads what the store holds and writes what it lacks; `log` gets the run's decisions and `publish`
    its manifest at the end (None: nothing is published)."""

    log: Log
    publish: Publish | None = None

    def materialise(self, plan: RunPlan) -> Materialised:
        return materialise_samples(Home.at(plan.home), plan.benchmark, plan.source, plan.config.shards,
                                   plan.config.limit, plan.config.max_image_pixels, self.log)

    def check_prompts(self, plan: RunPlan, shard_paths: list[str]) -> list[str]:
        return checked_shards(plan, shard_paths, self.log)

    def resolve_identities(self, plan: RunPlan, shard_paths: list[str]) -> dict[str, ShardOutcome]:
        return resolve_identities(plan, shard_paths)

    def record_stored(self, plan: RunPlan, stored: dict[str, ShardOutcome]) -> None:
        write_stored_shards(Home.at(plan.home), plan.run_id, stored)

    def read_stored(self, plan: RunPlan) -> dict[str, ShardOutcome]:
        return read_stored_shards(Home.at(plan.home), plan.run_id)

    def route_and_score(self, plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]
                        ) -> RunScores:
        return score_run(plan, shard_paths, stage_maps)

    def finish(self, plan: RunPlan, done: ShardsDone, scores: RunScores, phases: Phases) -> RunManifest:
        return finish_run(plan, done, scores, phases, self.log, self.publish)
