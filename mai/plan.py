"""The run plan: a RunConfig validated once and resolved into everything a run's flows, shard flows, tasks and
manifest writer read (models with their fingerprints, the ordered stages, the data source, each prompt kind's
decoding, the backend identities). Built once per run, before any model loads; a bad configuration fails here with
a message that says what to fix. It is also the parameter a shard flow receives, on this machine or a worker.

Pure core: it resolves paths the caller gives it (the store's root, models and datasets directories) and checks
the backend's setup, but knows nothing of Prefect or the store's layout.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from mai import cascade
from mai.backends.base import EngineOptions
from mai.code_version import code_versions
from mai.config import (
    BUILTIN_MODELS,
    GENERATED_BENCHMARKS,
    SHIPPED_MODELS,
    RunConfig,
    check_backend,
    check_transfer,
    fingerprint_directory,
    hub_commit,
    resolve_model,
    shipped_models_dir,
)
from mai.errors import ConfigError
from mai.evals.fingerprint_cache import FingerprintCache
from mai.evals.loading import DataSource, resolve_source
from mai.evals.registry import get_entry
from mai.evals.spec import SpecBenchmark
from mai.host import host_name
from mai.identity import BackendIdentity
from mai.provenance import command_line, load_average
from mai.types import Decoding, ModelSpec, PromptKind, Role, StageSpec


class StoreLocations(BaseModel):
    """Where the store keeps what a plan resolves against (given by the shell, which owns the store's layout)."""

    model_config = ConfigDict(frozen=True)

    root: Path
    models: Path     # the built-in models
    datasets: Path   # the generated benchmarks' data
    # the store's stable id (storage/paths.store_id): hosts may mount the store at other paths, and find it by this
    # id (storage/paths.locate_store); empty for a caller that has none
    store_id: str = ""
    # the file that keeps local datasets' fingerprints between runs (mai/evals/fingerprint_cache.py); None: every
    # plan hashes its local data again
    fingerprints: Path | None = None


class RunPlan(BaseModel):
    """One run, resolved. `config` is the validated configuration as given; the other fields are what it
    resolves to. Read-only: every reader sees the same plan."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    home: str                                  # the store root, resolved (on the host that planned the run)
    store_id: str = ""                         # the store's id: another host may mount it at another path
    config: RunConfig
    models: dict[Role, ModelSpec]              # only the roles the run's stages use
    stages: list[StageSpec]                    # in order; sparse RT's token selection is one of them
    source: DataSource
    decodings: dict[PromptKind, Decoding]
    # role -> the backend that computes that role's generations, as their identities name it (mai.identity)
    backends: dict[str, BackendIdentity] = {}
    # what the run's provenance records of its start (mai.provenance): the command that planned it and the
    # machine's load averages then (its end's are read when the manifest is written)
    command: str = ""
    load_at_start: list[float] = []
    # the code the run was planned with (mai.code_version): a drain on a host that runs other code is taken out
    code_versions: dict[str, str] = {}

    # --- what the configuration says, read through the plan --------------------------------------------------

    @property
    def benchmark(self) -> str:
        return self.config.benchmark

    @property
    def backend_ids(self) -> dict[str, str]:
        """role -> the backend's text in every generation identity of that role."""
        return {role: backend.text for role, backend in self.backends.items()}

    @property
    def run_name(self) -> str:
        return self.config.run_name or self.run_id

    @property
    def capture_layers(self) -> list[int]:
        """Every layer whose attention a capture prefill records: the transfer layer and the extra ones."""
        layer = self.config.transfer_layer
        return sorted({*self.config.capture_layers, *([layer] if layer is not None else [])})

    def engine_options(self, role: Role) -> EngineOptions:
        return EngineOptions(url=self.config.vllm_urls.get(role), env=self.config.vllm_env, home=self.home)

    @property
    def tags(self) -> list[str]:
        """How a person finds the run among flow runs: benchmark, mode and the models it used."""
        models = [f"{role}:{Path(m.identity_name).name}" for role, m in sorted(self.models.items())]
        return ["mai", f"mai-run:{self.run_id}", f"benchmark:{self.benchmark}", f"mode:{self.config.mode}", *models]


def localize_models(plan: RunPlan, models_dir: Path, fingerprints: FingerprintCache | None = None) -> RunPlan:
    """The plan as the host that runs a shard sees it. The parent resolved local checkpoints to paths on its own
    machine; a worker on another machine may have them elsewhere: a shipped model (`mai-shapes-*`) is taken from
    the package installed on this host, a built-in one from `models_dir`; any local checkpoint must then have the
    fingerprint the run planned (its identity), else the shard fails saying which path and which fingerprints
    (`fingerprints`: the store's cache of them)."""
    models = {role: _localize(spec, models_dir, fingerprints) for role, spec in plan.models.items()}
    return plan if models == plan.models else plan.model_copy(update={"models": models})


def _localize(spec: ModelSpec, models_dir: Path, fingerprints: FingerprintCache | None) -> ModelSpec:
    if not spec.local:  # a hub id at the commit the run was planned with: this host's cache has it, or fetches it
        hub_commit(spec.name_or_path, spec.revision)  # else the host is taken out, saying so, before any load
        return spec
    path, name, host = Path(spec.name_or_path), spec.identity_name, host_name()
    if not path.is_dir():
        if name in SHIPPED_MODELS:
            path = shipped_models_dir() / name
        elif name in BUILTIN_MODELS:
            path = models_dir / name
        else:
            raise ConfigError(f"model directory {spec.name_or_path} does not exist on host {host}: every worker needs "
                              "the checkpoint at the path the run was planned with (a shared filesystem)")
    if not path.is_dir():
        raise ConfigError(f"model '{name}' is not on host {host} (looked in {path}): install mai there, or build the "
                          "built-in models in the shared store (`mai build-models`)")
    found = f"sha256:{fingerprint_directory(path, fingerprints)}"
    if found != spec.revision:
        raise ConfigError(f"model directory {path} on host {host} has fingerprint {found}, but the run was planned with "
                          f"{spec.revision} (another checkpoint or another version of it): put the same files there")
    return dataclasses.replace(spec, name_or_path=str(path.resolve()))


def build_plan(config: RunConfig, store: StoreLocations, run_id: str | None = None) -> RunPlan:
    """Validate `config` and resolve it; raises ConfigError, saying what to fix, before any model loads."""
    entry = get_entry(config.benchmark)
    check_backend(config.backend, config.vllm_urls)
    stages = cascade.stages_for(config.mode, config.s2, config.single_model, config.single_prompt, config.transfer)
    roles: set[Role] = {stage.role for stage in stages}
    fingerprints = FingerprintCache(store.fingerprints) if store.fingerprints else None
    models = {role: _resolve_role(config, role, store.models, fingerprints) for role in sorted(roles)}
    source = resolve_source(_data_location(config, store, entry.hub_ids), config.split or entry.split,
                            config.subset or entry.config, config.revision or entry.revision, fingerprints,
                            default_split=entry.split)
    if config.benchmark_spec is not None:
        SpecBenchmark(config.benchmark_spec).check_data(source)
    check_transfer(config, models.get("large"))
    if config.backend == "vllm":
        from mai.backends.vllm_backend import check_setup  # the vLLM client's checks, only for vLLM runs

        check_setup(models, config.vllm_urls, config.vllm_env, store.root)
    run_id = run_id or f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"  # UTC start time: sorts by it
    return RunPlan(run_id=run_id, home=str(store.root), store_id=store.store_id, config=config, models=models,
                   stages=stages, source=source,
                   decodings={stage.prompt_kind: config.decoding(stage.prompt_kind) for stage in stages},
                   backends=_backends(config, models, store.root), command=command_line(),
                   load_at_start=load_average(), code_versions=code_versions())


def _resolve_role(config: RunConfig, role: Role, models_dir: Path, fingerprints: FingerprintCache | None
                  ) -> ModelSpec:
    name, revision = (config.small_model, config.small_revision) if role == "small" else \
        (config.large_model, config.large_revision)
    return resolve_model(name, revision, config.dtype, models_dir, fingerprints)


def _backends(config: RunConfig, models: Mapping[Role, ModelSpec], root: Path) -> dict[str, BackendIdentity]:
    """The backend per role as its generation identities name it (engine, versions, image processor: mai.identity)."""
    from mai.backends.registry import backend_identity

    return {role: backend_identity(config.backend, model, EngineOptions(url=config.vllm_urls.get(role),
                                                                        env=config.vllm_env, home=str(root)))
            for role, model in models.items()}


def backend_difference(plan: RunPlan) -> str | None:
    """What differs between the backends the run was planned with and those this host would compute with (its
    vLLM environment, its `mai serve` servers, its MAI_VLLM_SERVE_ARGS, whether it has torchvision), in words; None
    when nothing does. A host whose backend differs would store outputs under identities that do not describe them."""
    here = _backends(plan.config, plan.models, Path(plan.home))
    differ = [f"the {role} model's backend here is '{here[role].text}', planned '{planned.text}'"
              for role, planned in sorted(plan.backends.items()) if here.get(role) != planned]
    return "; ".join(differ) or None


def _data_location(config: RunConfig, store: StoreLocations, hub_ids: tuple[str, ...]) -> str:
    if config.data:
        return config.data
    if config.benchmark in GENERATED_BENCHMARKS:
        return str(store.datasets / config.benchmark)
    if not hub_ids:
        raise ConfigError(f"benchmark '{config.benchmark}' has no default data: pass --data")
    return hub_ids[0]
