"""Option parsing the command groups share: the run options (-> RunConfig) and list-valued options."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mai.errors import ConfigError
from mai.types import PROMPT_KINDS, RUN_MODES

if TYPE_CHECKING:  # RunConfig is pydantic: imported by the commands that build one, not by `mai sql`
    from mai.config import RunConfig


def printing(result: Callable[[argparse.Namespace], object]) -> Callable[[argparse.Namespace], int]:
    """A command's handler that prints what `result` returns for the parsed options (a path, a line)."""
    def handler(args: argparse.Namespace) -> int:
        print(result(args))
        return 0
    return handler


def add_run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--config", type=Path, help="a JSON file of RunConfig fields; flags override it")
    run.add_argument("--benchmark")
    run.add_argument("--data", help="local Parquet / save_to_disk copy, or a hub id")
    run.add_argument("--data-root", help="a folder a benchmark spec may read (its data and images) beyond the "
                                         "spec's own folder: a spec cannot widen where it reads by itself")
    run.add_argument("--split")
    run.add_argument("--subset", help="dataset config name")
    run.add_argument("--revision", help="pinned dataset revision")
    run.add_argument("--limit", type=int)
    run.add_argument("--small-model")
    run.add_argument("--large-model")
    run.add_argument("--small-revision")
    run.add_argument("--large-revision")
    run.add_argument("--dtype", choices=("float32", "bfloat16", "float16"))
    run.add_argument("--mode", choices=RUN_MODES)
    run.add_argument("--s2", action=argparse.BooleanOptionalAction, default=None)
    run.add_argument("--single-model", choices=("small", "large"))
    run.add_argument("--single-prompt", choices=("S", "E", "R"))
    run.add_argument("--transfer", choices=("full", "sparse"))
    run.add_argument("--transfer-layer", type=int, help="0-based layer of the large model (sparse RT)")
    run.add_argument("--transfer-delta", type=float, help="share of attention the selected tokens cover (0.8)")
    run.add_argument("--backend", help="transformers (in-process, default) or vllm (`vllm serve` per model)")
    run.add_argument("--vllm-url", action="append", default=[], metavar="ROLE=URL",
                     help="backend vllm: a running server for the small/large model, e.g. small=http://host:8000")
    run.add_argument("--vllm-env", help="backend vllm: environment to start servers from (default $MAI_VLLM_ENV, "
                                        "else .venv-vllm in the checkout: `make vllm-env`)")
    run.add_argument("--shards", type=int)
    run.add_argument("--workers", type=int, help="fan the shards out to N workers of the mai-gpu pool (needs a Prefect "
                                                  "server and `prefect deploy --all`); default: in this process")
    run.add_argument("--batch-size", action="append", default=[], metavar="N|KIND=N",
                     help="requests per model call: N for every prompt kind, KIND=N for one (repeatable, e.g. "
                          "--batch-size 16 --batch-size R=64); never changes outputs")
    run.add_argument("--max-new-tokens", action="append", default=[], metavar="KIND=N",
                     help=f"output budget per prompt kind {list(PROMPT_KINDS)}, repeatable")
    run.add_argument("--min-new-tokens", action="append", default=[], metavar="KIND=N",
                     help="generate at least N tokens for a prompt kind (with --max-new-tokens KIND=N: exactly N; "
                          "for latency runs with random-weight models), repeatable")
    run.add_argument("--max-image-pixels", type=int, help="a sample whose image has more pixels is a per-sample "
                                                          "error, refused before decoding (default 2**26 = 8192 x 8192)")
    run.add_argument("--max-prompt-tokens", type=int, metavar="N",
                     help="a sample whose prompt has more tokens (image tokens included, as the model's processor "
                          "counts them) is a per-sample error; default: what the model's context holds")
    run.add_argument("--name", dest="run_name")
    run.add_argument("--json", action="store_true", help="print the run manifest as JSON")


def run_config(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None) -> RunConfig:
    """Flags over a --config file over `defaults` (the fields a command's default configuration names, e.g.
    `mai regress`'s shapes pair; RunConfig's own defaults for the rest). What follows from the fields (budgets and
    batch sizes: the models' and a benchmark spec's) is decided once all are merged, so `mai regress --benchmark
    SPEC` gets the spec's budgets, not the default pair's."""
    from mai.config import RunConfig, config_from_mapping  # pydantic: loaded by the run commands only

    values: dict[str, Any] = dict(defaults or {})
    values.update(config_file(args.config) if args.config else {})
    for field in RunConfig.model_fields:
        value = getattr(args, field, None)
        if value is not None and field not in ("max_new_tokens", "min_new_tokens", "batch_size"):
            values[field] = value
    values.update(_batch_sizes(args.batch_size, values))
    if args.max_new_tokens:
        values["max_new_tokens"] = {**values.get("max_new_tokens", {}),
                                    **_budgets(args.max_new_tokens, "--max-new-tokens")}
    if args.min_new_tokens:
        values["min_new_tokens"] = {**values.get("min_new_tokens", {}),
                                    **_budgets(args.min_new_tokens, "--min-new-tokens")}
    if args.vllm_url:
        values["vllm_urls"] = {**values.get("vllm_urls", {}), **role_urls(args.vllm_url)}
    values["home"] = args.home
    return config_from_mapping(values)


def config_file(path: Path) -> dict[str, Any]:
    """A --config file: a JSON object of RunConfig fields (which RunConfig then checks); anything else is a
    ConfigError that names the file and what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--config {path}: cannot be read ({type(error).__name__}: {error})") from error
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--config {path}: not valid JSON at line {error.lineno} column {error.colno}: "
                          f"{error.msg}") from error
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: must hold a JSON object of run fields, e.g. {{\"benchmark\": \"pope\"}}, "
                          f"not a {type(values).__name__}")
    return values


def _budgets(items: list[str], flag: str) -> dict[str, int]:
    budgets = {}
    for item in items:
        kind, _, number = item.partition("=")
        if not number.isdigit():
            raise ConfigError(f"{flag} expects KIND=N, got '{item}'")
        budgets[kind] = int(number)
    return budgets


def _batch_sizes(items: list[str], values: dict[str, Any]) -> dict[str, Any]:
    """--batch-size N sets every kind (dropping per-kind sizes from defaults and --config), KIND=N one kind."""
    update: dict[str, Any] = {}
    kinds: dict[str, int] = {}
    for item in items:
        kind, _, number = item.rpartition("=")
        if not number.isdigit() or (kind and kind not in PROMPT_KINDS):
            raise ConfigError(f"--batch-size expects N or KIND=N with KIND one of {list(PROMPT_KINDS)}, got '{item}'")
        if kind:
            kinds[kind] = int(number)
        else:
            update["batch_size"], kinds = int(number), {}
    if "batch_size" in update:
        update["batch_sizes"] = kinds
    elif kinds:
        update["batch_sizes"] = {**values.get("batch_sizes", {}), **kinds}
    return update


def batch_sizes_per_kind(items: list[str]) -> dict[str, int]:
    """`--batch-size` of `mai time`: N for every prompt kind, KIND=N for one (as `mai run` reads them)."""
    update = _batch_sizes(items, {})
    every = update.get("batch_size")
    return {**({kind: every for kind in PROMPT_KINDS} if every else {}), **update.get("batch_sizes", {})}


def role_urls(items: list[str]) -> dict[str, str]:
    """--vllm-url small=URL / large=URL, repeatable or comma-separated."""
    urls = {}
    for item in (part for value in items for part in value.split(",") if part.strip()):
        role, _, url = item.partition("=")
        if role not in ("small", "large") or not url:
            raise ConfigError(f"--vllm-url expects small=URL or large=URL, got '{item}'")
        urls[role] = url
    return urls


def model_profiles(items: list[str]) -> dict[str, str]:
    """--profile MODEL=PROFILE, repeatable."""
    mapping = {}
    for item in items:
        model, _, profile = item.partition("=")
        if not profile:
            raise ConfigError(f"--profile expects MODEL=PROFILE, got '{item}'")
        mapping[model] = profile
    return mapping


def integers(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise ConfigError(f"{option} takes comma-separated integers, got '{text}'") from error


def layers_and_deltas(layers: str, deltas: str | None) -> tuple[list[int], list[float] | None]:
    """`mai sweep`'s grid: --layers integers, --deltas numbers (None: the configuration's delta)."""
    try:
        return [int(x) for x in layers.split(",") if x.strip()], [float(x) for x in deltas.split(",")] if deltas else None
    except ValueError as error:
        raise ConfigError(f"--layers takes integers and --deltas numbers, comma-separated: {error}") from error
