"""Turn a RunConfig into a validated plan: the single source of truth of a run. Every check that needs no model
happens here, so a bad configuration fails before anything loads, with a message that says what to fix. The
plan's steps (`context.stages`, in order; sparse RT's token selection is one of them) are what the shard flows
run, each through the one generic step task."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from mai.storage.paths import Home
from mai.tasks.jobs import RunContext

from mai import cascade
from mai.config import GENERATED_BENCHMARKS, RunConfig, check_backend, check_transfer, resolve_model
from mai.errors import ConfigError
from mai.evals.loading import DataSource, resolve_source
from mai.evals.registry import get_entry
from mai.identity import needs_backend
from mai.types import Decoding, ModelSpec, PromptKind, Role


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    context: RunContext
    source: DataSource
    decodings: dict[PromptKind, Decoding]


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def prepare_run(config: RunConfig, home: Home, run_id: str | None = None) -> RunPlan:
    entry = get_entry(config.benchmark)
    check_backend(config.backend, config.vllm_urls)
    stages = cascade.stages_for(config.mode, config.s2, config.single_model, config.single_prompt, config.transfer)
    roles: set[Role] = {stage.role for stage in stages}
    models = {
        role: resolve_model(getattr(config, f"{role}_model"), getattr(config, f"{role}_revision"), config.dtype,
                            home.models)
        for role in sorted(roles)
    }
    source = resolve_source(_data_location(config, home, entry.hub_ids), config.split or entry.split,
                            config.subset or entry.config, config.revision)
    check_transfer(config, models.get("large"))
    if config.backend == "vllm":
        from mai.backends.vllm_backend import check_setup

        check_setup(models, config.vllm_urls, config.vllm_env, home.root)
    context = RunContext(
        backend_ids=_backend_ids(config, models, home),
        run_id=run_id or new_run_id(), home=str(home.root), benchmark=config.benchmark, mode=config.mode,
        models=models, stages=stages, backend=config.backend, batch_size=config.batch_size,
        batch_sizes=config.batch_sizes,
        vllm_urls=config.vllm_urls, vllm_env=config.vllm_env,
        transfer=config.transfer, transfer_layer=config.transfer_layer, transfer_delta=config.transfer_delta,
        capture_layers=sorted({*config.capture_layers, *([config.transfer_layer] if config.transfer_layer is not None
                                                          else [])}),
    )
    if config.workers:
        from mai.flows.fanout import check_fanout

        check_fanout()
    decodings = {stage.prompt_kind: config.decoding(stage.prompt_kind) for stage in stages}
    return RunPlan(run_id=context.run_id, context=context, source=source, decodings=decodings)


def _backend_ids(config: RunConfig, models: dict[Role, ModelSpec], home: Home) -> dict[str, str]:
    """Backend and version per role whose generation identities include them (outside float32, mai.identity)."""
    from mai.backends.base import EngineOptions
    from mai.backends.registry import backend_identity

    return {role: backend_identity(config.backend, model, EngineOptions(url=config.vllm_urls.get(role),
                                                                        env=config.vllm_env, home=str(home.root)))
            for role, model in models.items() if needs_backend(model)}


def _data_location(config: RunConfig, home: Home, hub_ids: tuple[str, ...]) -> str:
    if config.data:
        return config.data
    if config.benchmark in GENERATED_BENCHMARKS:
        return str(home.datasets / config.benchmark)
    if not hub_ids:
        raise ConfigError(f"benchmark '{config.benchmark}' has no default data: pass --data")
    return hub_ids[0]
