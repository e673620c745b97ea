"""The small, serialisable values that tasks receive: paths, specs and id maps, never live objects."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

from mai.backends.base import EngineOptions
from mai.identity import canonical_hash
from mai.types import Decoding, ModelSpec, PromptKind, Role, RunMode, StageName, StageSpec

# stage name -> sample_id -> gen_id: how later stages find what earlier stages produced
StageMaps = dict[StageName, dict[str, str]]


class RunContext(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    home: str
    benchmark: str
    mode: RunMode
    models: dict[Role, ModelSpec]
    stages: list[StageSpec]
    backend: str
    batch_size: int
    batch_sizes: dict[str, int] = {}  # per prompt kind, over batch_size
    transfer: str = "full"
    transfer_layer: int | None = None
    transfer_delta: float = 0.8
    capture_layers: list[int] = []
    vllm_urls: dict[str, str] = {}
    vllm_env: str | None = None
    # role -> backend and its version, for the roles whose identities include them (outside float32)
    backend_ids: dict[str, str] = {}

    def stage(self, name: StageName) -> StageSpec:
        return next(s for s in self.stages if s.name == name)

    def batch_for(self, kind: PromptKind) -> int:
        return self.batch_sizes.get(kind, self.batch_size)

    def engine_options(self, role: Role) -> EngineOptions:
        return EngineOptions(url=self.vllm_urls.get(role), env=self.vllm_env, home=self.home)


def ledger_key(run_id: str, shard_path: str) -> str:
    """The accounting key of one run's shard (mai.progress): other runs in the process never share it."""
    return f"{run_id}/{shard_path}"


class StageJob(BaseModel):
    """One step (a stage, or sparse RT's token selection) over one shard."""

    model_config = ConfigDict(frozen=True)

    context: RunContext
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
        return ledger_key(self.context.run_id, self.shard_path)

    def cache_key(self) -> str:
        """Everything that determines the step's outputs and nothing that does not (run id, batch size, and in
        float32 the backend: float32 greedy outputs are identical across them)."""
        model = self.context.models[self.stage.role]
        transfer = ([self.context.transfer_layer, self.context.transfer_delta, self.context.capture_layers]
                    if self.stage.name == "select_rt" else None)
        backend = self.context.backend_ids.get(self.stage.role)
        return canonical_hash({
            **({"backend": backend} if backend else {}),  # outside float32 only: float32 keys stay as they were
            "home": self.context.home,
            "benchmark": self.context.benchmark,
            "mode": self.context.mode,
            "shard": self.shard_path,
            "stage": [self.stage.name, self.stage.prompt_kind, self.stage.upstream],
            "model": [model.identity_name, model.revision, model.dtype],
            "decoding": self.decoding.as_dict(),
            "earlier": self.earlier,
            "transfer": transfer,
        })
