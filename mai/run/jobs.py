"""The small, serialisable values that tasks receive: the run plan, paths and id maps, never live objects."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

from mai.manifest import StageMaps
from mai.plan import RunPlan
from mai.types import Decoding, StageSpec


def ledger_key(run_id: str, shard_path: str) -> str:
    """The accounting key of one run's shard (mai.progress): other runs in the process never share it."""
    return f"{run_id}/{shard_path}"


class StageJob(BaseModel):
    """One step (a stage, or sparse RT's token selection) over one shard."""

    model_config = ConfigDict(frozen=True)

    plan: RunPlan
    shard_path: str
    stage: StageSpec
    decoding: Decoding
    earlier: StageMaps

    @property
    def shard_name(self) -> str:
        return PurePosixPath(self.shard_path).stem

    @property
    def label(self) -> str:
        """How the Prefect UI names the task run: shard and stage."""
        return f"{self.shard_name} / {self.stage.name}"

    @property
    def ledger(self) -> str:
        return ledger_key(self.plan.run_id, self.shard_path)
