"""Run configuration: the typed parameters of a run (also the Prefect flow's parameters), and their
validation. Everything that can be checked without loading a model is checked here, first."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mai.backends.base import BACKENDS
from mai.backends.untested_family import check_checkpoint_config
from mai.errors import ConfigError
from mai.evals.fingerprint_cache import FileStat, FingerprintCache, file_stats
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS
from mai.evals.spec import NAME_PATTERN, BenchmarkSpec, is_spec_path, load_spec, per_prompt_kind
from mai.types import (
    BackendName,
    BenchmarkName,
    Decoding,
    Dtype,
    ModelSpec,
    PromptKind,
    Role,
    RunMode,
)

SMALL_BUILTIN = "mai-tiny-small"
LARGE_BUILTIN = "mai-tiny-large"
# the tiny InternVL-architecture pair (mai/backends/tiny_internvl.py), built offline like the Qwen pair
INTERNVL_SMALL_BUILTIN = "mai-tiny-internvl-small"
INTERNVL_LARGE_BUILTIN = "mai-tiny-internvl-large"
BUILTIN_MODELS = (SMALL_BUILTIN, LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN, INTERNVL_LARGE_BUILTIN)
# the trained pair of the `shapes` world, shipped with the package (training/train_shapes_pair.py)
SHAPES_SMALL = "mai-shapes-small"
SHAPES_LARGE = "mai-shapes-large"
SHIPPED_MODELS = (SHAPES_SMALL, SHAPES_LARGE)
# benchmarks whose data the project generates itself (under the store's datasets/<name>)
GENERATED_BENCHMARKS = ("demo", "shapes")

# Reasoning needs room; short answers do not. Every value is part of the generations' identities.
DEFAULT_MAX_NEW_TOKENS: dict[str, int] = {"S": 32, "E": 256, "R": 1024, "S2": 32, "RT": 32}
# the built-in tiny models produce noise: short budgets keep the demo at a few minutes on 2 CPU cores
DEMO_MAX_NEW_TOKENS: dict[str, int] = {"S": 12, "E": 32, "R": 48, "S2": 12, "RT": 12}
# the trained shapes pair: the longest reasoning trace of the world is ~120 tokens, an S answer 4
SHAPES_MAX_NEW_TOKENS: dict[str, int] = {"S": 12, "E": 48, "R": 160, "S2": 12, "RT": 12}
# Batch sizes per prompt kind for the trained shapes pair on 2 CPU cores (docs/benchmarks.md, "Cascade speed"):
# short answers (S, S2, RT) are prefill, flat from 16 to 128 with 32 best; reasoning (R, E) gains to 64 (each
# decoding step's fixed Python cost is shared by more rows). Batch sizes never change outputs in float32.
SHAPES_BATCH_SIZES: dict[str, int] = {"S": 32, "E": 64, "R": 64, "S2": 32, "RT": 32}
# The largest output budget a run may ask for: the longest output Qwen3-VL's own generation settings allow
# (32,768 tokens). A larger value is a typo (S=100000000) that would let a degenerate output loop for hours and
# that vLLM refuses anyway once prompt + budget exceed the server's context length.
MAX_NEW_TOKENS_LIMIT = 32768


def shipped_models_dir() -> Path:
    return Path(__file__).resolve().parent / "assets" / "models"


class RunConfig(BaseModel):
    """One run: a benchmark split, a model pair (or one model), a cascade variant."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # closed sets are enums in the JSON schema (Prefect's form shows dropdowns, its API refuses other values
    # when a run is created); in Python they stay strings checked by `prepare_run` with a ConfigError that says
    # what to fix
    # a built-in benchmark's name, a spec file's path (.yaml: read when the configuration is made, see
    # `_spec_file`), or a spec benchmark's name with its `benchmark_spec`; the built-in names are the schema's examples
    # (a free name is checked when the run is planned, before any model loads, saying what to choose)
    benchmark: str = Field("demo", description="a built-in benchmark, or a benchmark spec file (path/to/bench.yaml)",
                           json_schema_extra={"examples": list(get_args(BenchmarkName)),
                                              "pattern": f"({NAME_PATTERN})|(\\.[yY][aA]?[mM][lL]$)"})
    benchmark_spec: BenchmarkSpec | None = Field(None, description="the spec of a benchmark given as a spec file "
                                                                   "(filled from the file; recorded with the run)")
    data: str | None = Field(None, description="local Parquet/save_to_disk copy or hub id; default per benchmark")
    # where files lie is no identity (their content is): not in the run's key
    data_root: str | None = Field(None, description="a folder a benchmark spec may read beyond its own folder (the "
                                                    "user's choice: a spec cannot widen where it reads)")
    split: str | None = None
    subset: str | None = Field(None, description="dataset config name (e.g. 'en' for MMBench)")
    revision: str | None = Field(None, description="pinned dataset revision (required for hub ids)")
    limit: int | None = Field(None, ge=1, description="use only the first N rows")
    small_model: str = SMALL_BUILTIN
    large_model: str = LARGE_BUILTIN
    small_revision: str = "main"
    large_revision: str = "main"
    dtype: str = Field("float32", json_schema_extra={"enum": list(get_args(Dtype))})
    mode: RunMode = "cascade"
    s2: bool = False
    single_model: Role = "large"
    single_prompt: PromptKind = Field("S", json_schema_extra={"enum": ["S", "E", "R"]})
    transfer: Literal["full", "sparse"] = Field("full", description="RT with the whole reasoning or a selection")
    transfer_layer: int | None = Field(None, ge=0, description="0-based layer whose attention selects tokens")
    transfer_delta: float = Field(0.8, gt=0.0, le=1.0, description="share of attention the selection covers")
    capture_layers: list[int] = Field(default_factory=list, description="more layers to capture in the same prefill")
    backend: str = Field("transformers", json_schema_extra={"enum": list(get_args(BackendName))})
    # keys from closed sets carry `propertyNames` in the JSON schema: Prefect checks a deployment run's parameters
    # against it when the run is created, so {"Q": 5} is refused there rather than on a worker
    vllm_urls: dict[str, str] = Field(default_factory=dict,
                                      description="backend vllm: role -> base URL of a running server",
                                      json_schema_extra={"propertyNames": {"enum": list(get_args(Role))}})
    vllm_env: str | None = Field(None, description="backend vllm: environment with vLLM (default $MAI_VLLM_ENV)")
    shards: int = Field(2, ge=1)
    workers: int = Field(0, ge=0, description="0: shards run in this process; N: fanned out as `mai-shard` flow "
                                               "runs to the `mai-gpu` work pool, N at a time")
    batch_size: int = Field(8, ge=1)
    batch_sizes: dict[str, int] = Field(default_factory=dict,
                                        description="per prompt kind, over batch_size, e.g. {\"S\": 32, \"R\": 64}; "
                                                    "the shipped pair's tuned sizes unless either is given",
                                        json_schema_extra={"propertyNames": {"enum": list(get_args(PromptKind))}})
    max_new_tokens: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_MAX_NEW_TOKENS),
                                           json_schema_extra={"propertyNames": {"enum": list(get_args(PromptKind))}})
    # a floor on output length per prompt kind (with max_new_tokens = N: exactly N tokens), for latency runs with
    # random-weight models, whose outputs would otherwise end anywhere; part of each generation's identity
    min_new_tokens: dict[str, int] = Field(default_factory=dict,
                                           description="per prompt kind, e.g. {\"R\": 256}: generate at least N "
                                                       "tokens (latency runs with fixed output lengths)",
                                           json_schema_extra={"propertyNames": {"enum": list(get_args(PromptKind))}})
    max_image_pixels: int = Field(DEFAULT_MAX_IMAGE_PIXELS, ge=1,
                                  description="a sample whose image has more pixels is an error (read from the "
                                              "image's header, before decoding)")
    # A limit on the samples, not on any output: it only decides which samples are errors, so it is no part of a
    # generation's identity (an answered sample's outputs are the same under any limit), and it is part of the run's
    # key (`key`), as the samples a run scores are what its metrics mean.
    max_prompt_tokens: int | None = Field(None, ge=1,
                                          description="a sample whose prompt has more tokens (image tokens included) "
                                                      "is an error; None: what each model's context holds")
    run_name: str | None = None
    home: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _budgets_of_the_models(cls, data: Any) -> Any:
        """Budgets start from the models' own defaults (`default_budgets`), then the benchmark spec's own
        (`max_new_tokens:` in the spec); given ones (the command's) override kind by kind. So do batch sizes
        (`default_batch_sizes`), unless the configuration names a `batch_size` for every kind. The spec file is read
        first, so its budgets are known here."""
        if not isinstance(data, dict):
            return data
        data = _with_spec_file(data)
        given = data.get("max_new_tokens")
        if given is None or isinstance(given, dict):
            data = {**data, "max_new_tokens": {**default_budgets(data), **_spec_budgets(data), **(given or {})}}
        given_sizes = data.get("batch_sizes")
        if "batch_size" not in data and (given_sizes is None or isinstance(given_sizes, dict)):
            data = {**data, "batch_sizes": {**default_batch_sizes(data), **(given_sizes or {})}}
        return data

    @model_validator(mode="after")
    def _register_spec(self) -> RunConfig:
        """A spec benchmark is known by its name in every process that holds this configuration."""
        if self.benchmark_spec is not None:
            if self.benchmark_spec.name != self.benchmark:
                raise ValueError(f"benchmark '{self.benchmark}' and its spec's name '{self.benchmark_spec.name}' "
                                 "differ: give the spec file as the benchmark")
            from mai.evals.registry import register_spec

            register_spec(self.benchmark_spec)
        return self

    @field_validator("batch_sizes")
    @classmethod
    def _batch_kinds(cls, value: dict[str, int]) -> dict[str, int]:
        return per_prompt_kind(value, "batch_sizes")

    def batch_for(self, kind: PromptKind) -> int:
        return self.batch_sizes.get(kind, self.batch_size)

    @field_validator("max_new_tokens")
    @classmethod
    def _known_kinds(cls, value: dict[str, int]) -> dict[str, int]:
        per_prompt_kind(value, "max_new_tokens")
        too_large = {kind: v for kind, v in value.items() if v > MAX_NEW_TOKENS_LIMIT}
        if too_large:
            raise ValueError(f"max_new_tokens {too_large} over the limit of {MAX_NEW_TOKENS_LIMIT} tokens (the longest "
                             "output the supported models are run with); a budget is a cap, not a target")
        return {**DEFAULT_MAX_NEW_TOKENS, **value}

    @model_validator(mode="after")
    def _floors_under_budgets(self) -> RunConfig:
        per_prompt_kind(self.min_new_tokens, "min_new_tokens")
        over = {kind: n for kind, n in self.min_new_tokens.items() if n > self.max_new_tokens[kind]}
        if over:
            raise ValueError(f"min_new_tokens {over} above max_new_tokens for the same kind "
                             f"({ {kind: self.max_new_tokens[kind] for kind in over} }): raise --max-new-tokens too")
        return self

    def decoding(self, kind: PromptKind) -> Decoding:
        return Decoding(max_new_tokens=self.max_new_tokens[kind], min_new_tokens=self.min_new_tokens.get(kind, 0))

    def key(self) -> str:
        """Identifies what the run computes (not its name, store location or extra captured layers)."""
        # which server answers never changes outputs (the backend itself is in the key and in every identity)
        payload = self.model_dump(exclude={"run_name", "home", "batch_size", "batch_sizes", "shards", "workers", "capture_layers",
                                           "vllm_urls", "vllm_env", "data_root"})
        for field, default in _ADDED_FIELDS.items():  # at their defaults, fields added later keep older keys
            if payload.get(field) == default:
                del payload[field]
        if self.benchmark_spec is not None:  # the spec by its content, not where its file or data lie
            payload["benchmark_spec"] = {**self.benchmark_spec.identity(), "metric": self.benchmark_spec.chosen_metric}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


# fields added after runs were stored, with their defaults: a run at the default has the key it had before
_ADDED_FIELDS: dict[str, object] = {"max_image_pixels": DEFAULT_MAX_IMAGE_PIXELS, "max_prompt_tokens": None,
                                    "min_new_tokens": {}, "benchmark_spec": None}


def _with_spec_file(data: dict[str, Any]) -> dict[str, Any]:
    """`benchmark: path/to/bench.yaml` becomes the spec's name and content: a configuration carries its benchmark's
    spec wherever it goes (a worker, a manifest), so nothing later reads the file again."""
    if isinstance(data.get("benchmark"), str) and is_spec_path(data["benchmark"]):
        spec = load_spec(data["benchmark"], data.get("data_root"))
        data = {**data, "benchmark": spec.name, "benchmark_spec": spec}
    return data


def _spec_budgets(data: Mapping[str, Any]) -> dict[str, int]:
    """The output budgets the configuration's benchmark spec sets (none when it has no spec)."""
    spec = data.get("benchmark_spec")
    budgets = spec.max_new_tokens if isinstance(spec, BenchmarkSpec) else \
        spec.get("max_new_tokens") if isinstance(spec, dict) else None
    return dict(budgets) if isinstance(budgets, dict) else {}


def default_budgets(values: Mapping[str, Any]) -> dict[str, int]:
    """The output budgets a configuration starts from, the one place that decides them: the shipped shapes pair's
    (SHAPES_MAX_NEW_TOKENS) when every model the run uses is one of the pair, so `mai run --benchmark shapes
    --small-model mai-shapes-small --large-model mai-shapes-large` computes what `mai demo`, `mai regress` and the
    deployments of prefect.yaml compute (the general defaults, S 32 / R 1024, would be other identities and so
    recompute everything); else DEFAULT_MAX_NEW_TOKENS."""
    return dict(SHAPES_MAX_NEW_TOKENS if _uses_only_shipped(values) else DEFAULT_MAX_NEW_TOKENS)


def default_batch_sizes(values: Mapping[str, Any]) -> dict[str, int]:
    """Per-kind batch sizes a configuration starts from when it names no `batch_size`: the shipped pair's tuned
    ones (SHAPES_BATCH_SIZES) when every model the run uses is one of the pair; else none (every kind runs at
    `batch_size`)."""
    return dict(SHAPES_BATCH_SIZES) if _uses_only_shipped(values) else {}


def models_used(values: Mapping[str, Any]) -> list[str]:
    """The models a configuration (its fields, before or after validation) runs: one in single mode, its
    `single_model`'s; else the pair."""
    small, large = values.get("small_model", SMALL_BUILTIN), values.get("large_model", LARGE_BUILTIN)
    if values.get("mode", "cascade") == "single":
        return [small if values.get("single_model", "large") == "small" else large]
    return [small, large]


def _uses_only_shipped(values: Mapping[str, Any]) -> bool:
    return all(m in SHIPPED_MODELS for m in models_used(values))


def shapes_pair_fields() -> dict[str, Any]:
    """The fields that make a configuration the trained shapes pair's (shipped weights) on the shapes test split,
    MAI cascade; everything else (budgets and batch sizes included) follows from them, as for any configuration."""
    return {"benchmark": "shapes", "small_model": SHAPES_SMALL, "large_model": SHAPES_LARGE}


def shapes_pair_config(**overrides: Any) -> RunConfig:
    """What `mai demo` runs and the default configuration of the regression flow: `shapes_pair_fields` with
    `overrides`. Its budgets are the pair's (`default_budgets`)."""
    return RunConfig(**{**shapes_pair_fields(), **overrides})


def check_transfer(config: RunConfig, large: ModelSpec | None) -> None:
    """Sparse RT needs a layer that exists in the large model (read from its config.json, no weights)."""
    if config.transfer == "full":
        if config.transfer_layer is not None or config.capture_layers:
            raise ConfigError("--transfer-layer / capture layers apply only with --transfer sparse")
        return
    if config.mode == "single" or large is None:
        raise ConfigError("sparse RT needs a large model's RT stage: use mode cascade or full_rt")
    if config.transfer_layer is None:
        raise ConfigError("--transfer sparse needs --transfer-layer L (0-based layer of the large model)")
    layers = model_num_layers(large)
    bad = [layer for layer in [config.transfer_layer, *config.capture_layers] if not 0 <= layer < layers]
    if bad:
        raise ConfigError(f"layer(s) {bad} do not exist: the large model has layers 0..{layers - 1}")


def model_num_layers(model: ModelSpec) -> int:
    if model.local:
        path = Path(model.name_or_path) / "config.json"
    else:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(model.name_or_path, "config.json", revision=model.revision))
    config = json.loads(path.read_text())
    text = config.get("text_config") or config.get("llm_config") or config
    return int(text["num_hidden_layers"])


def check_backend(backend: str, vllm_urls: Mapping[str, str] | None = None) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend '{backend}': choose one of {list(BACKENDS)}")
    if vllm_urls and backend != "vllm":
        raise ConfigError("--vllm-url applies only with --backend vllm")


def resolve_model(name: str, revision: str, dtype: str, models_dir: Path,
                  fingerprints: FingerprintCache | None = None) -> ModelSpec:
    """A built-in name, a local checkpoint directory or a hub id. Local models are identified by a
    fingerprint of their files (`fingerprints`: the store's cache of them), so the same weights are the same model
    wherever they lie; a hub model by the commit its revision resolves to in the Hugging Face cache, which is what
    its load reads (a branch such as `main` moves)."""
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"dtype '{dtype}' is not supported: use float32, bfloat16 or float16")
    if name.startswith("random:"):
        from mai.backends.architectures import architecture_name, known_architectures

        if architecture_name(name) not in known_architectures():
            raise ConfigError(f"unknown architecture '{name}': use one of "
                              f"{['random:' + a for a in known_architectures()]}")
        return ModelSpec(name, revision="random-init-seed0", dtype=dtype)
    path = models_dir / name if name in BUILTIN_MODELS else Path(name).expanduser()
    if name in SHIPPED_MODELS:
        path = shipped_models_dir() / name
        if not (path / "model.safetensors").exists():
            raise ConfigError(f"the shipped weights of '{name}' are missing from {path}: reinstall mai, or retrain "
                              "them with training/train_shapes_pair.py and copy them there")
    if name in BUILTIN_MODELS and not (path / "config.json").exists():
        raise ConfigError(f"built-in model '{name}' is not built yet: run `mai build-models`")
    if path.exists():
        if not (path / "config.json").exists():
            raise ConfigError(f"model directory '{path}' has no config.json: is it a Hugging Face checkpoint?")
        check_checkpoint_config(name, json.loads((path / "config.json").read_text()))
        return ModelSpec(str(path.resolve()), revision=f"sha256:{fingerprint_directory(path, fingerprints)}",
                         dtype=dtype, local=True)
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ConfigError(
            f"model '{name}' is neither an existing local directory nor a hub id 'owner/name' "
            f"(built-in models: {list(BUILTIN_MODELS + SHIPPED_MODELS)})"
        )
    return ModelSpec(name, revision=hub_commit(name, revision), dtype=dtype)


def hub_commit(repo_id: str, revision: str) -> str:
    """The commit that `revision` (a branch, a tag or a commit) of a hub model resolves to, read from where its
    config.json lies in the Hugging Face cache (`snapshots/<commit>/`: fetched there first when online), proving
    the model reachable; the model is then loaded at that commit, and named by it."""
    from huggingface_hub import hf_hub_download

    try:
        config_path = hf_hub_download(repo_id, "config.json", revision=revision)
    except Exception as error:  # offline, unknown repo, gated: all mean the same to the user
        raise ConfigError(
            f"model '{repo_id}' (revision {revision}) is not in the local Hugging Face cache and could not be "
            f"fetched ({type(error).__name__}). Download it first or pass a local checkpoint directory."
        ) from error
    check_checkpoint_config(repo_id, json.loads(Path(config_path).read_text()))
    snapshot = Path(config_path).parent  # the cache's layout (as mai.provenance.weights_fingerprint reads it)
    return snapshot.name if snapshot.parent.name == "snapshots" else revision


# files that document a checkpoint without changing what it computes: editing a model card must not
# invalidate the stored outputs of the model
DOCUMENTATION_FILES = ("README.md", "evaluation.json", "training_log.json")


_FINGERPRINTS: dict[tuple[str, tuple[FileStat, ...]], str] = {}
HASH_CHUNK = 2**24  # bytes read at a time: a checkpoint's weight files are hashed without holding them in memory


def fingerprint_directory(path: Path, cache: FingerprintCache | None = None) -> str:
    """sha256 over every file's name and every byte of it (dotfiles and documentation skipped): a checkpoint is
    named by all that a model load reads, so a fine-tune that kept the first and last MiB of its weight files (its
    embeddings and head frozen) is another model. Hashing is once per version of the files: remembered in this
    process, and between processes in `cache` (the store's, mai/evals/fingerprint_cache.py), both keyed by each
    file's name, size and times, which any rewrite changes."""
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and p.name not in DOCUMENTATION_FILES)
    listed_at = time.time_ns()
    listing = file_stats([(str(f.relative_to(path)), f) for f in files])
    key = (f"checkpoint:{path.resolve()}", listing)
    if key not in _FINGERPRINTS:
        known = cache.lookup(key[0], listing) if cache is not None else None
        _FINGERPRINTS[key] = known or _hash_files(path, files)
        if cache is not None and known is None:
            cache.store(key[0], listing, _FINGERPRINTS[key], listed_at)
    return _FINGERPRINTS[key]


def _hash_files(path: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def config_from_mapping(values: Mapping[str, Any]) -> RunConfig:
    benchmark = values.get("benchmark")
    spec = values.get("benchmark_spec")
    if isinstance(benchmark, str) and is_spec_path(benchmark):
        spec = load_spec(benchmark, values.get("data_root"))  # here: a spec's ConfigError reaches the user as it is
        values = {**values, "benchmark": spec.name, "benchmark_spec": spec}
    elif spec is not None and (spec.get("name") if isinstance(spec, dict) else spec.name) != benchmark:
        values = {**values, "benchmark_spec": None}  # another benchmark given over a spec one's defaults
    try:
        return RunConfig(**values)
    except ValueError as error:
        raise ConfigError(str(error)) from error


def sweep_variants(config: RunConfig, layers: list[int], deltas: list[float] | None = None) -> list[RunConfig]:
    """The sweep's runs, delta-major: each captures every sweep layer in its one attention prefill."""
    if not layers:
        raise ConfigError("a sweep needs at least one layer")
    return [config.model_copy(update={
        "transfer": "sparse", "transfer_layer": layer, "transfer_delta": delta, "capture_layers": sorted(set(layers)),
        "run_name": f"{config.run_name or 'sweep'}-L{layer}-d{delta}"})
        for delta in deltas or [config.transfer_delta] for layer in layers]
