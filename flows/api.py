"""The library API: what `mai`'s commands, the training scripts and notebooks call to run and inspect things.

`mai/` is the pure core and never imports the shell (flows, tasks, storage, Prefect). This module is the one
exception, on purpose: it is the facade ABOVE the flows, so that a caller needs one import, not the layout of
`mai.flows`. It reaches into the shell only lazily, inside each function; importing it stays cheap and nothing
in the core imports it. `mai.flows.cli` is a thin argparse layer over these functions.

    from mai.flows import api
    manifest = api.run(RunConfig(benchmark="demo", limit=8))
    print(api.summary(manifest))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mai.config import RunConfig
from mai.errors import ConfigError

if TYPE_CHECKING:
    from mai.storage.paths import Home

    from mai.evals.base import ScoredSample
    from mai.scoring import PredictionLine

Rows = tuple[list[str], list[tuple[object, ...]]]


@dataclass(frozen=True)
class ScoreReport:
    summary: dict[str, Any]  # benchmark, scorer_profile, scored, errors (unusable lines), metrics
    per_line: list[dict[str, Any]]  # one record per input line: its score, or why it could not be used


class Estimate(NamedTuple):
    name: str
    stages: list[dict[str, Any]]  # stage, profile, calls, ttft_s, decode_s, total_s


# --- runs ---------------------------------------------------------------------------------------------------


def run(config: RunConfig, progress: bool = True) -> dict[str, Any]:
    """Validate (before any model loads), run the flow (with a progress bar on the terminal), and return its
    manifest with the store's `home` and `catalog` paths added."""
    from mai.flows.run import mai_run

    home = prepare(config)
    with _progress_bar(progress):
        manifest = mai_run(config)
    manifest["home"], manifest["catalog"] = str(home.root), str(home.catalog)
    return manifest


def prepare(config: RunConfig) -> Home:
    """What every call that runs a configuration does first: quiet the libraries' own progress bars, build the
    built-in models and data the configuration names, and validate it, so a bad one fails before any model
    loads."""
    from mai.flows.plan import prepare_run

    home = _assets_for(config)
    prepare_run(config, home)
    return home


def sweep(config: RunConfig, layers: list[int], deltas: list[float] | None = None) -> list[dict[str, Any]]:
    """One sparse-RT run per transfer layer (and delta); every variant is validated before anything loads."""
    from mai.flows.plan import prepare_run
    from mai.flows.sweep import mai_sweep

    home = _assets_for(config)
    for layer in layers:
        for delta in deltas or [config.transfer_delta]:
            prepare_run(config.model_copy(update={"transfer": "sparse", "transfer_layer": layer,
                                                  "transfer_delta": delta, "capture_layers": layers}), home)
    with _progress_bar(True):
        return mai_sweep(config, layers, deltas)


def speculative(config: RunConfig, draft_tokens: int = 4, progress: bool = True) -> dict[str, Any]:
    """The speculative-decoding baseline against the configuration's cascade run (small drafts, large
    verifies)."""
    from mai.flows.plan import prepare_run
    from mai.flows.speculative import mai_speculative

    home = _assets_for(config)
    prepare_run(config.model_copy(update={"mode": "cascade", "s2": False}), home)
    with _progress_bar(progress):  # the reference run's stages, then a `speculative` bar
        return mai_speculative(config, draft_tokens)


def regress(config: RunConfig, baseline: str | None = None, min_drop: float = 1.0,
            alpha: float = 0.05, require_all: bool = False) -> dict[str, Any]:
    """Run `config` and compare it with `baseline` (a file or stored run id; default: the shipped shapes
    baseline) over the samples both scored. Raises `mai.flows.regression.RegressionDetected` (its message is the
    report) on a significant drop of at least `min_drop` points, on a baseline sample that is an error in the run,
    and, with `require_all`, on a baseline sample the run does not hold (else a warning: `result["warning"]`)."""
    from mai.flows.regression import default_baseline, load_baseline, mai_regression
    from mai.storage.paths import Home

    load_baseline(Home.at(config.home), baseline or str(default_baseline()))  # fails fast on a missing baseline
    prepare(config)
    with _progress_bar(True):
        return mai_regression(config, baseline, min_drop, alpha, require_all)


def write_baseline(run_id: str, out: Path, home: str | Path | None = None) -> Path:
    """A stored run as a baseline file for `regress`."""
    import json

    from mai.flows.regression import baseline_file
    from mai.storage.paths import Home
    from mai.storage.runs import is_complete

    store = Home.at(home)
    if not is_complete(store, run_id):
        raise ConfigError(f"no completed run '{run_id}' in {store.root}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(baseline_file(store, run_id), indent=1) + "\n")
    return out


def serve(models: list[str], revision: str = "main", dtype: str = "float32", vllm_env: str | None = None,
          home: str | Path | None = None, say: Callable[[str], None] = print) -> None:
    """Keep a vLLM server per model up until Ctrl-C; runs with backend vllm on the same store find them.
    `say` gets the start line and each server's ready line."""
    from mai.flows.assets import build_models
    from mai.storage.paths import Home

    from mai.backends.vllm_server import require_env, serve_forever
    from mai.config import BUILTIN_MODELS, resolve_model

    store = Home.at(home)
    env = require_env(vllm_env)
    if set(models) & set(BUILTIN_MODELS):
        build_models(store)
    specs = [resolve_model(name, revision, dtype, store.models) for name in models]
    say(f"starting {len(specs)} vLLM server(s) from {env}; Ctrl-C stops them")
    serve_forever(env, specs, store.root, on_ready=say)


def summary(manifest: dict[str, Any]) -> str:
    """A run manifest as the few lines `mai run` prints."""
    from mai.dashboards.render import render_summary

    return render_summary(manifest)


def _assets_for(config: RunConfig) -> Home:
    from mai.flows.assets import ensure_builtin_assets
    from mai.storage.paths import Home

    quiet_library_progress_bars()
    home = Home.at(config.home)
    ensure_builtin_assets(config, home)
    return home


def _progress_bar(show: bool) -> AbstractContextManager[object]:
    from mai.flows.progress_bar import ProgressBar

    return ProgressBar() if show else nullcontext()


def quiet_library_progress_bars() -> None:
    """Our bar shows the work; the libraries' per-file bars (weights, parquet) are noise around it."""
    import datasets
    from transformers.utils import logging as transformers_logging

    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()


# --- scores -------------------------------------------------------------------------------------------------


def score(benchmark: str, prediction_lines: Iterable[str | bytes], profile: str | None = None) -> ScoreReport:
    """Score JSONL lines (benchmark rows in the hub's column schema plus `prediction`) without a model. The
    benchmark and profile are checked before the first line is read."""
    from mai.evals.registry import get_benchmark
    from mai.scoring import check_profile, read_prediction_lines, score_outputs

    chosen = get_benchmark(benchmark)
    scorer_profile = check_profile(chosen, profile)
    lines = read_prediction_lines(chosen, prediction_lines)
    usable = [(line.sample, line.prediction) for line in lines if line.sample is not None]
    scored, metrics = score_outputs(chosen, usable, scorer_profile)
    errors = [{"line": line.line, "error": line.error} for line in lines if line.sample is None]
    summary = {"benchmark": chosen.name, "scorer_profile": scorer_profile, "scored": len(scored), "errors": errors,
               "metrics": [m.__dict__ for m in metrics]}
    return ScoreReport(summary, _per_line(lines, scored))


def _per_line(lines: list[PredictionLine], scored: list[ScoredSample]) -> list[dict[str, Any]]:
    by_line = iter(scored)  # one scored sample per usable line, in order
    records = []
    for line in lines:
        item = next(by_line) if line.sample is not None else None
        records.append({"line": line.line, "sample_id": item.sample.sample_id, "parsed": item.parsed,
                        "score": item.score} if item else {"line": line.line, "error": line.error})
    return records


def rescore(run_id: str, profile: str, home: str | Path | None = None) -> dict[str, Any]:
    """Re-score a stored run under another scorer profile (no model)."""
    from mai.flows.rescore import mai_rescore

    return mai_rescore(run_id, profile, _root(home))


# --- latency ------------------------------------------------------------------------------------------------


def profile(model: str, name: str, resolutions: list[int], query_tokens: list[int], output_tokens: list[int],
            repeats: int = 3, revision: str = "main", dtype: str = "float32", home: str | Path | None = None,
            replace: bool = False, progress: bool = True) -> list[dict[str, Any]]:
    """Measure a model on simulated inputs into the latency profile `name`; returns its rows. A `profile` bar on
    the terminal counts the timed model calls."""
    from mai.flows.latency import mai_profile

    quiet_library_progress_bars()
    with _progress_bar(progress):
        return mai_profile(model, name, resolutions, query_tokens, output_tokens, repeats, revision, dtype,
                           home=_root(home), replace=replace)


def import_profile(csv: Path, name: str, model: str | None = None, hardware: str = "published",
                   home: str | Path | None = None, replace: bool = False) -> Path:
    """A latency profile from published numbers: one model's rows of a CSV (`model` picks it when the CSV
    holds several)."""
    from mai.storage.latency import rows_from_csv, write_profile
    from mai.storage.paths import Home

    rows = rows_from_csv(csv, hardware)
    models = sorted({r["model"] for r in rows})
    if model:
        rows = [r for r in rows if r["model"] == model]
    elif len(models) > 1:
        raise ConfigError(f"{csv} holds several models {models}: pick one with --model")
    if not rows:
        raise ConfigError(f"no rows for model '{model}' in {csv} (models: {models})")
    return write_profile(Home.at(home), name, rows, replace=replace)


def estimate(run_id: str, profiles: dict[str, str] | None = None, small_profile: str | None = None,
             large_profile: str | None = None, name: str | None = None, home: str | Path | None = None) -> Estimate:
    """Price a stored run under latency profiles (equation 27): `profiles` maps model names to profiles;
    `small_profile` / `large_profile` name the profiles of the run's own small and large model."""
    from mai.flows.latency import mai_estimate
    from mai.storage.paths import Home

    mapping = dict(profiles or {})
    if small_profile or large_profile:
        for model, chosen in zip(_run_models(Home.at(home), run_id), (small_profile, large_profile)):
            if model and chosen:
                mapping[str(model)] = chosen
    label = name or "+".join(sorted(set(mapping.values())))
    return Estimate(label, mai_estimate(run_id, mapping, label, _root(home)))


def _run_models(home: Home, run_id: str) -> tuple[object, ...]:
    from mai.storage.catalog import connect

    with connect(home) as connection:  # a parameter, never the id pasted into the SQL
        row = connection.execute("SELECT small_model, large_model FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise ConfigError(f"no completed run '{run_id}'")
    return tuple(row)


# --- catalog ------------------------------------------------------------------------------------------------


def query(home: str | Path | None, sql: str) -> Rows:
    """(columns, rows) of SQL over the catalog views: samples, generations, routes, runs, metrics, ..."""
    from mai.storage.catalog import query as run_query
    from mai.storage.paths import Home

    return run_query(Home.at(home), sql)


def saved_queries() -> list[tuple[str, str]]:
    """(name, description) of each saved query."""
    from mai.dashboards.saved import list_saved

    return list_saved()


def saved_query(name: str) -> str:
    from mai.dashboards.saved import load_saved

    return load_saved(name)


def catalog(home: str | Path | None = None) -> Path:
    """(Re)build the DuckDB catalog file; returns its path."""
    from mai.storage.catalog import build_catalog
    from mai.storage.paths import Home

    return build_catalog(Home.at(home))


# --- built-in assets ----------------------------------------------------------------------------------------


def build_models(home: str | Path | None = None, force: bool = False) -> list[Path]:
    """The built-in tiny model pair (offline)."""
    from mai.flows.assets import build_models as build
    from mai.storage.paths import Home

    return build(Home.at(home), force=force)


def build_shapes(home: str | Path | None = None, force: bool = False) -> Path:
    """The shapes benchmark's train/validation/test splits."""
    from mai.flows.assets import build_shapes_dataset
    from mai.storage.paths import Home

    return build_shapes_dataset(Home.at(home), force=force)


def build_demo(home: str | Path | None = None, rows: int | None = None, seed: int | None = None,
               force: bool = False) -> Path:
    """The demo benchmark (offline, seeded); `rows` and `seed` default to the demo's own."""
    from mai.flows.assets import DEMO_ROWS, DEMO_SEED, build_demo_dataset
    from mai.storage.paths import Home

    return build_demo_dataset(Home.at(home), n=rows or DEMO_ROWS, seed=seed or DEMO_SEED, force=force)


def _root(home: str | Path | None) -> str | None:
    """The flows take the store root as a string (a Prefect parameter)."""
    return str(home) if home is not None else None


def store_compact(home: str | Path | None = None, min_small_files: int = 2) -> list[dict[str, Any]]:
    """Compact every partition of the store: small batch files merged into large ones, duplicates removed."""
    from dataclasses import asdict

    from mai.storage.maintenance import compact_store
    from mai.storage.paths import Home

    return [asdict(r) for r in compact_store(Home.at(home), min_small_files=min_small_files)]


def store_stats(home: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows, files, bytes and partitions per table."""
    from dataclasses import asdict

    from mai.storage.maintenance import store_stats as stats
    from mai.storage.paths import Home

    return [asdict(s) for s in stats(Home.at(home))]


def store_verify(home: str | Path | None = None) -> dict[str, Any]:
    """Schemas, unique identities, manifests consistent with files, no orphan temp files or versions."""
    from mai.storage.maintenance import verify_store
    from mai.storage.paths import Home

    return verify_store(Home.at(home)).as_dict()


# --- reading results: compare, policy lab, report ------------------------------------------------------------


def compare(run_a: str, run_b: str, profile: str | None = None, resamples: int = 10_000, seed: int = 0,
            home: str | Path | None = None) -> dict[str, Any]:
    """Run B against run A, paired per sample: each run's score, samples better / worse, exact McNemar (or sign)
    p-value, bootstrap 95 % interval of the difference, per category, tokens and estimated time."""
    from mai.dashboards.compare import compare_runs
    from mai.storage.paths import Home

    return compare_runs(Home.at(home), run_a, run_b, profile, resamples, seed)


def parity(run_a: str, run_b: str, home: str | Path | None = None, home_b: str | Path | None = None
           ) -> dict[str, Any]:
    """Run B against run A, output by output: per stage the share of token-identical outputs over the samples
    both ran (same content), how many are one stored output shared by both (same identity), the share of equal
    final answers and routes, and the score difference (B - A). `home_b`: run B's store (default: `home`)."""
    from mai.dashboards.parity import parity as run_parity
    from mai.storage.paths import Home

    return run_parity(Home.at(home), run_a, run_b, Home.at(home_b) if home_b is not None else None)


def policies(benchmark: str | None = None, small_model: str | None = None, large_model: str | None = None,
             dataset: str | None = None, profile: str | None = None, small_profile: str | None = None,
             large_profile: str | None = None, home: str | Path | None = None) -> list[dict[str, Any]]:
    """The routing-policy lab (no model runs): per benchmark split and model pair in the store, the score and cost
    of routing policies over the stored outputs (large S, small R, MV1 -> RT, the cascade, Full RT, the oracle,
    ...), the Pareto frontier and APGR-style areas; a policy whose outputs are missing names the `mai run`
    command that stores them."""
    from mai.dashboards.policies import policy_labs
    from mai.storage.paths import Home

    return policy_labs(Home.at(home), benchmark, small_model, large_model, dataset, profile, small_profile,
                       large_profile)


def report(run_ids: list[str] | None = None, out: str | Path = "report.html", trace_samples: int = 500,
           compare: list[str] | None = None, home: str | Path | None = None) -> dict[str, Any]:
    """Write the offline HTML report over `run_ids` (None: every completed run) built from the catalog views;
    `compare` = [run A, run B] adds run vs run (two `run_ids` alone compare those). Returns its path, size in
    bytes, build seconds, runs and sections."""
    from mai.dashboards.report import build_report
    from mai.storage.paths import Home

    if trace_samples < 1:
        raise ConfigError("--trace-samples must be at least 1")
    built = build_report(Home.at(home), run_ids, Path(out), trace_samples, compare or [])
    return {"path": str(built.path), "bytes": built.bytes, "seconds": built.seconds, "runs": built.runs,
            "sections": built.sections, "trace_samples": built.trace_samples}
