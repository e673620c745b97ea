"""The small, serialisable values that tasks receive: the run plan, paths and id maps, never live objects."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

from mai.identity import canonical_hash
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

    def cache_key(self) -> str:
        """Everything that determines the step's outputs and nothing that does not (run id, batch size). The
        backend is part of it, as of every generation identity (mai.identity)."""
        model = self.plan.models[self.stage.role]
        transfer = ([self.plan.transfer_layer, self.plan.transfer_delta, self.plan.capture_layers]
                    if self.stage.name == "select_rt" else None)
        backend = self.plan.backend_ids.get(self.stage.role)
        return canonical_hash({
            **({"backend": backend} if backend else {}),
            "home": self.plan.home,
            "benchmark": self.plan.benchmark,
            "mode": self.plan.mode,
            "shard": self.shard_path,
            "stage": [self.stage.name, self.stage.prompt_kind, self.stage.upstream],
            "model": [model.identity_name, model.revision, model.dtype],
            "decoding": self.decoding.as_dict(),
            "earlier": self.earlier,
            "transfer": transfer,
        })
