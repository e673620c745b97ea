"""The library API: what `mai`'s commands, the training scripts and notebooks call to run and inspect things.

Installed as `mai.api` from `api/`, above the core (`mai/`, which never imports the shell) and the shell (flows,
Prefect), which it reaches only lazily, inside each function, so importing it stays cheap. The command line
(`cli/`, installed as `mai.cli`) is a thin argparse layer over it.

    from mai import api
    manifest = api.run(RunConfig(benchmark="demo", limit=8))
    print(api.summary(manifest))
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from mai.errors import ConfigError
from mai.storage.paths import Home

if TYPE_CHECKING:  # the run types only in signatures: `mai sql` and the other store commands skip pydantic's models
    from mai.config import RunConfig
    from mai.dashboards.compare import Comparison
    from mai.dashboards.parity import Parity
    from mai.dashboards.policies import LabRecord
    from mai.dashboards.report import Built as BuiltReport
    from mai.evals.spec_check import SpecCheck
    from mai.manifest import RunManifest
    from mai.pipeline import HandedOver
    from mai.plan import RunPlan
    from mai.run.baseline import RegressionResult
    from mai.run.estimate import StageTime
    from mai.run.rescore import Rescored
    from mai.run.speculative import SpeculativeSummary
    from mai.run.timing import TimingSummary
    from mai.scoring import ScoreReport
    from mai.storage.maintenance import TableStats
    from mai.storage.partitions import Compaction
    from mai.storage.rows import LatencyProfileRow
    from mai.storage.verify import VerificationRecord


Rows = tuple[list[str], list[tuple[object, ...]]]


class Estimate(NamedTuple):
    name: str
    stages: list[StageTime]


# --- runs ---------------------------------------------------------------------------------------------------


def run(config: RunConfig, progress: bool = True, local: bool = False, startup_s: float | None = None,
        plan: RunPlan | None = None) -> RunManifest:
    """Validate and resolve the configuration once (before any model loads), run it, and return its manifest with
    the store's `home` and `catalog` paths. A run with nothing to compute, and any with `local`, computes in this
    process (no Prefect, no server); else it is the `mai-run` flow (its shards here, or on a work pool with
    `config.workers`). `startup_s`: the caller's start-up seconds, the run's first phase; `plan`: `config`'s, made."""
    decided = _resolved(config, local, progress, startup_s, plan)
    plan = decided.plan
    if decided.manifest is not None:
        return _with_store_paths(decided.manifest, plan)
    try:
        with _prefect_api(plan.home):
            from mai.flows.run import mai_run

            with _progress_bar(progress):  # named after the run from its start (the flow names runs it plans itself)
                manifest = mai_run.with_options(flow_run_name=f"mai-run/{plan.run_name}")(config, plan, decided.handed)
    except Exception as error:  # noqa: BLE001 (raised again unless the run is complete in the store)
        manifest = _completed_in_store(error, plan)
    return _with_store_paths(manifest, plan)


def _completed_in_store(error: Exception, plan: RunPlan) -> RunManifest:
    """Recording in Prefect never changes a run's outcome: a run whose Prefect API stopped answering after the run
    was written to the store (its last call, ending the flow run) is complete, and its manifest is the stored one.
    Any other failure is raised again."""
    from mai.flows.prefect_api import api_lost
    from mai.storage.runs import is_complete, read_manifest

    home = Home.at(plan.home)
    if api_lost(error) is None or not is_complete(home, plan.run_id):
        raise error
    return read_manifest(home, plan.run_id)


class Decided(NamedTuple):
    """What `_resolved` decided: the run's plan (resolved), and either its manifest (it ran here) or its resolution
    handed over to the `mai-run` flow."""

    plan: RunPlan
    manifest: RunManifest | None
    handed: HandedOver | None


def _resolved(config: RunConfig, local: bool = False, progress: bool = False, startup_s: float | None = None,
              planned: RunPlan | None = None) -> Decided:
    """The one place a command decides on its executor, having planned and resolved the run once: it ran here
    (nothing to compute, or `local`), or its resolution is handed over to the `mai-run` flow, once what computing
    needs is checked (a store whose locks work, the workers)."""
    import logging

    from mai.pipeline import Phases, complete, hand_over, resolve
    from mai.run.plan import check_can_compute, prepare_run
    from mai.run.prompt_limits import prompts_checked_before
    from mai.run.shard import InProcessShards
    from mai.run.steps import StoreSteps

    if local and config.workers:
        raise ConfigError(f"--local computes in this process, --workers {config.workers} fans the shards out over a "
                          "Prefect work pool: give one of them")
    phases = Phases(startup_s)
    plan = planned or prepare_run(config, _assets_for(config), check_store=False)
    phases.end("plan_s")
    if not local and not config.workers and not prompts_checked_before(plan):
        # a run about to count new prompts (seconds), and then compute: its temporary Prefect server starts
        # meanwhile, where its flow would wait for it (a run of checked prompts may be a lookup, which needs none)
        from mai.flows.prefect_api import start_early

        start_early(Home.at(plan.home))
    log = logging.getLogger("mai")
    steps = StoreSteps(log)
    resolved = resolve(plan, steps, phases)
    if not resolved.todo:
        return Decided(resolved.plan, complete(resolved, steps, InProcessShards(log), log), None)
    check_can_compute(plan)
    if local:
        with _progress_bar(progress):
            return Decided(resolved.plan, complete(resolved, steps, InProcessShards(log), log), None)
    _check_workers(config)
    return Decided(resolved.plan, None, hand_over(resolved, steps))


def _check_workers(config: RunConfig) -> None:
    """A fanned-out run's workers, before any model loads (imports Prefect: only for a fanned-out run)."""
    if config.workers:
        from mai.flows.fanout import check_workers

        check_workers(config)


def _with_store_paths(manifest: RunManifest, plan: RunPlan) -> RunManifest:
    home = Home.at(plan.home)
    manifest["home"], manifest["catalog"] = str(home.root), str(home.catalog)
    return manifest


def _prefect_api(home: str | Path | None) -> AbstractContextManager[object]:
    """Before a flow runs, and before its module imports Prefect (Prefect reads its settings once per process): a
    Prefect API (the configured one, else a temporary server of this process, on the database of the store at
    `home`), and the settings the flows run under there (flows/prefect_api.py)."""
    from mai.flows.prefect_api import ensure_api

    return ensure_api(Home.at(home))


def plan_run(config: RunConfig) -> RunPlan:
    """What every call that runs a configuration does first: quiet the libraries' own progress bars, build the
    built-in models and data the configuration names, and validate and resolve it into the run's plan, so a bad
    one fails before any model loads."""
    from mai.run.plan import prepare_run

    plan = prepare_run(config, _assets_for(config))
    _check_workers(config)
    return plan


def sweep(config: RunConfig, layers: list[int], deltas: list[float] | None = None, local: bool = False
          ) -> list[RunManifest]:
    """One sparse-RT run per transfer layer (and delta); every variant is validated before anything loads. `local`:
    each run on the in-process executor (no Prefect), else the `mai-sweep` flow."""
    from mai.config import sweep_variants
    from mai.run.plan import prepare_run

    home, variants = _assets_for(config), sweep_variants(config, layers, deltas)
    plans = [prepare_run(variant, home) for variant in variants]
    if local:
        return [run(variant, local=True, plan=plan) for variant, plan in zip(variants, plans, strict=True)]
    _check_workers(config)
    from mai.flows.sweep import mai_sweep

    with _prefect_api(config.home), _progress_bar(True):
        return mai_sweep(config, layers, deltas, plans)


def speculative(config: RunConfig, draft_tokens: int = 4, progress: bool = True, local: bool = False
                ) -> SpeculativeSummary:
    """The speculative-decoding baseline against the configuration's cascade run (small drafts, large
    verifies). `local`: in this process, its reference run on the in-process executor (no Prefect)."""
    from mai.run.plan import prepare_run
    from mai.run.speculative import pair_config, speculative_baseline

    plan = prepare_run(pair_config(config), _assets_for(config))
    if local:
        with _progress_bar(progress):
            return speculative_baseline(config, draft_tokens, plan, lambda reference: run(reference, False, True))
    _check_workers(config)
    from mai.flows.speculative import mai_speculative

    with _prefect_api(config.home), _progress_bar(progress):  # the reference run's stages, then a `speculative` bar
        return mai_speculative(config, draft_tokens, plan)


def regress(config: RunConfig, baseline: str | None = None, min_drop: float = 1.0,
            alpha: float = 0.05, require_all: bool = False, local: bool = False) -> RegressionResult:
    """Run `config` and compare it with `baseline` (a file or stored run id; default: the shipped shapes
    baseline) over the samples both scored. Raises `mai.run.baseline.RegressionDetected` (its message is the
    report) on a significant drop of at least `min_drop` points, on a baseline sample that is an error in the run,
    and, with `require_all`, on a baseline sample the run does not hold (else a warning: `result["warning"]`).
    A run with nothing to compute, and any run with `local`, is computed and compared without Prefect (as `run`)."""
    from mai.run.baseline import default_baseline, judge, load_baseline

    home = Home.at(config.home)
    chosen = load_baseline(home, baseline or str(default_baseline()))  # fails fast on a missing baseline
    decided = _resolved(config, local, progress=True)
    if decided.manifest is not None:
        return judge(home, decided.manifest["run_id"], chosen, min_drop, alpha, require_all)
    with _prefect_api(config.home):
        from mai.flows.regression import mai_regression

        with _progress_bar(True):
            return mai_regression(config, baseline, min_drop, alpha, require_all, decided.plan, decided.handed)


def write_baseline(run_id: str, out: Path, home: str | Path | None = None) -> Path:
    """A stored run as a baseline file for `regress`."""
    import json

    from mai.run.baseline import baseline_file
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
    from mai.backends.vllm_server import require_env, serve_forever
    from mai.config import BUILTIN_MODELS, resolve_model
    from mai.evals.fingerprint_cache import FingerprintCache
    from mai.run.assets import build_models

    store = Home.at(home)
    env = require_env(vllm_env)
    if set(models) & set(BUILTIN_MODELS):
        build_models(store)
    specs = [resolve_model(name, revision, dtype, store.models, FingerprintCache(store.fingerprints)) for name in models]
    say(f"starting {len(specs)} vLLM server(s) from {env}; Ctrl-C stops them")
    serve_forever(env, specs, store.root, on_ready=say)


def summary(manifest: RunManifest) -> str:
    """A run manifest as the few lines `mai run` prints."""
    from mai.dashboards.render import render_summary

    return render_summary(manifest)


def _assets_for(config: RunConfig) -> Home:
    from mai.run.assets import ensure_builtin_assets
    quiet_library_progress_bars()
    home = Home.at(config.home)
    ensure_builtin_assets(config, home)
    return home


def _progress_bar(show: bool) -> AbstractContextManager[object]:
    from mai.progress_bar import ProgressBar

    return ProgressBar() if show else nullcontext()


def quiet_library_progress_bars() -> None:
    """Our bar shows the work; the libraries' per-file bars (weights, parquet) are noise around it. Without
    importing them: a run whose outputs are all stored never loads transformers or datasets, so their switches are
    set through the environment they read when imported (a user's own setting wins), and directly where a library
    is imported already."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")        # huggingface_hub, and transformers' bars
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


# --- scores -------------------------------------------------------------------------------------------------


def score(benchmark: str, prediction_lines: Iterable[str | bytes], profile: str | None = None) -> ScoreReport:
    """Score JSONL lines (benchmark rows in the hub's column schema, or a spec's columns, plus `prediction`) without
    a model; `benchmark` is a built-in's name or a spec file. The benchmark and profile are checked before the first
    line is read."""
    from mai.scoring import score_prediction_lines

    return score_prediction_lines(benchmark, prediction_lines, profile)


def rescore(run_id: str, profile: str, home: str | Path | None = None) -> Rescored:
    """Re-score a stored run under another scorer profile (no model)."""
    from mai.run.rescore import rescore_run

    return rescore_run(run_id, profile, _root(home))


# --- benchmarks ---------------------------------------------------------------------------------------------


class BuiltInBenchmark(NamedTuple):
    name: str
    data: str            # the default hub id, or "generated"
    split: str
    agreement_rule: str
    profiles: tuple[str, ...]


def benchmarks() -> list[BuiltInBenchmark]:
    """The built-in benchmarks: name, default data, split, agreement rule and scorer profiles."""
    from mai.evals.registry import BENCHMARKS, get_benchmark

    listed = []
    for name, entry in BENCHMARKS.items():
        benchmark = get_benchmark(name)
        listed.append(BuiltInBenchmark(name, entry.hub_ids[0] if entry.hub_ids else "generated", entry.split,
                                       benchmark.agreement_rule, benchmark.profiles))
    return listed


def check_benchmark(spec_file: str | Path, home: str | Path | None = None, prompts: bool = True,
                    data_root: str | Path | None = None) -> SpecCheck:
    """Validate a benchmark spec and read its data as a run would (every row, images decoded), without running a
    model; with `prompts`, also count its prompts' tokens with the default models' tokenizers (built into the store
    `home` when missing, as a run builds them) and find the rows over their context."""
    from mai.config import config_from_mapping
    from mai.evals.spec import load_spec
    from mai.evals.spec_check import check_spec
    from mai.run.benchmark_check import check_spec_file

    if not prompts:
        return check_spec(load_spec(spec_file, data_root))
    config = config_from_mapping({"benchmark": str(spec_file), "home": None if home is None else str(home),
                                  "data_root": None if data_root is None else str(data_root)})
    return check_spec_file(config, plan_run(config))


# --- latency ------------------------------------------------------------------------------------------------


def profile(model: str, name: str, resolutions: list[int], query_tokens: list[int], output_tokens: list[int],
            repeats: int = 3, revision: str = "main", dtype: str = "float32", home: str | Path | None = None,
            replace: bool = False, progress: bool = True) -> list[LatencyProfileRow]:
    """Measure a model on simulated inputs into the latency profile `name`; returns its rows. A `profile` bar on
    the terminal counts the timed model calls."""
    api = _prefect_api(home)
    from mai.flows.profiles import mai_profile

    quiet_library_progress_bars()
    with api, _progress_bar(progress):
        return mai_profile(model, name, resolutions, query_tokens, output_tokens, repeats, revision, dtype,
                           home=_root(home), replace=replace)


def import_profile(csv: Path, name: str, model: str | None = None, hardware: str = "published",
                   home: str | Path | None = None, replace: bool = False) -> Path:
    """A latency profile from published numbers: one model's rows of a CSV (`model` picks it when the CSV
    holds several)."""
    from mai.storage.latency import rows_from_csv, write_profile
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
    from mai.run.estimate import estimate_run

    mapping = dict(profiles or {})
    if small_profile or large_profile:
        for model, chosen in zip(_run_models(Home.at(home), run_id), (small_profile, large_profile)):
            if model and chosen:
                mapping[str(model)] = chosen
    label = name or "+".join(sorted(set(mapping.values())))
    return Estimate(label, estimate_run(run_id, mapping, label, _root(home)))  # a store computation: no Prefect


def time_runs(run_ids: list[str], name: str | None = None, batch_sizes: dict[str, int] | None = None,
              home: str | Path | None = None) -> TimingSummary:
    """Re-time stored runs in one regime as a timing set (`mai time`; mai/run/timing.py): their outputs recomputed
    here, batched as fresh runs batch them, each checked identical to the stored one; stored outputs stay."""
    from mai.run.timing import time_runs as timed

    return timed(_store_with_specs(home), run_ids, name, batch_sizes)


def _run_models(home: Home, run_id: str) -> tuple[object, ...]:
    from mai.storage.catalog import connect

    with connect(home) as connection:  # a parameter, never the id pasted into the SQL
        row = connection.execute("SELECT small_model, large_model FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise ConfigError(f"no completed run '{run_id}'")
    return tuple(row)


# --- catalog ------------------------------------------------------------------------------------------------


# what one query over the store may take by default (`mai sql --timeout/--memory-limit`): a cross join or a
# huge string otherwise runs for minutes and takes gigabytes
QUERY_TIMEOUT_S = 60.0
QUERY_MEMORY_LIMIT = "4GB"


def query(home: str | Path | None, sql: str, timeout_s: float | None = QUERY_TIMEOUT_S,
          memory_limit: str | None = QUERY_MEMORY_LIMIT, for_printing: bool = False) -> Rows:
    """(columns, rows) of SQL over the catalog views: samples, generations, routes, runs, metrics, ...; stopped
    with a ConfigError after `timeout_s` seconds or past `memory_limit` (None: no limit). `for_printing`: a result
    past what `mai sql` prints is refused, and dates and timestamps are DuckDB's text of them
    (mai/storage/query_results.py)."""
    from mai.storage.catalog import QueryLimits
    from mai.storage.catalog import query as run_query
    from mai.storage.query_results import FOR_PRINTING, UNBOUNDED
    return run_query(Home.at(home), sql, QueryLimits(timeout_s, memory_limit, FOR_PRINTING if for_printing else UNBOUNDED))


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
    return build_catalog(Home.at(home))


# --- built-in assets ----------------------------------------------------------------------------------------


def build_models(home: str | Path | None = None, force: bool = False) -> list[Path]:
    """The built-in tiny model pair (offline)."""
    from mai.run.assets import build_models as build
    return build(Home.at(home), force=force)


def build_shapes(home: str | Path | None = None, force: bool = False) -> Path:
    """The shapes benchmark's train/validation/test splits."""
    from mai.run.assets import build_shapes_dataset
    return build_shapes_dataset(Home.at(home), force=force)


def build_demo(home: str | Path | None = None, rows: int | None = None, seed: int | None = None,
               force: bool = False) -> Path:
    """The demo benchmark (offline, seeded); `rows` and `seed` default to the demo's own."""
    from mai.run.assets import DEMO_ROWS, DEMO_SEED, build_demo_dataset
    return build_demo_dataset(Home.at(home), n=rows or DEMO_ROWS, seed=seed or DEMO_SEED, force=force)


def _store_with_specs(home: str | Path | None) -> Home:
    """The store, with its spec benchmarks known by name in this process (the reports parse and score them)."""
    from mai.storage.benchmark_specs import register_recorded_specs

    store = Home.at(home)
    register_recorded_specs(store)
    return store


def _root(home: str | Path | None) -> str | None:
    """The flows take the store root as a string (a Prefect parameter)."""
    return str(home) if home is not None else None


def store_compact(home: str | Path | None = None, min_small_files: int = 2) -> list[Compaction]:
    """Compact every partition of the store: small batch files merged into large ones, duplicates removed."""
    from mai.storage.maintenance import compact_store

    return compact_store(Home.at(home), min_small_files=min_small_files)


def store_stats(home: str | Path | None = None) -> list[TableStats]:
    """Rows, files, bytes and partitions per table."""
    from mai.storage.maintenance import store_stats as stats

    return stats(Home.at(home))


def store_damage(home: str | Path | None = None) -> list[str]:
    """One line per file of the store that cannot be read (left out of every listing) or that a completed run has
    lost, naming it and what to run (storage/health.py)."""
    from mai.storage.health import store_damage as found

    return [damage.line() for damage in found(Home.at(home))]


def store_verify(home: str | Path | None = None, repair: bool = False) -> VerificationRecord:
    """Unreadable files, schemas, unique identities, references that point at nothing, manifests consistent with
    files, no orphan temp files or versions (storage/verify.py); `repair` moves damaged files into the store's
    quarantine folder, removes orphan temp files, rebuilds the catalog and says what the next run computes again."""
    from mai.storage.verify import verify_store

    return verify_store(Home.at(home), repair=repair)


# --- reading results: compare, policy lab, report ------------------------------------------------------------


def compare(run_a: str, run_b: str, profile: str | None = None, resamples: int = 10_000, seed: int = 0,
            home: str | Path | None = None) -> Comparison:
    """Run B against run A, paired per sample: each run's score, samples better / worse, exact McNemar (or sign)
    p-value, bootstrap 95 % interval of the difference, per category, tokens and estimated time."""
    from mai.dashboards.compare import compare_runs
    return compare_runs(_store_with_specs(home), run_a, run_b, profile, resamples, seed)


def parity(run_a: str, run_b: str, home: str | Path | None = None, home_b: str | Path | None = None
           ) -> Parity:
    """Run B against run A, output by output: per stage the share of token-identical outputs over the samples
    both ran (same content), how many are one stored output shared by both (same identity), the share of equal
    final answers and routes, and the score difference (B - A). `home_b`: run B's store (default: `home`)."""
    from mai.dashboards.parity import parity as run_parity
    return run_parity(Home.at(home), run_a, run_b, Home.at(home_b) if home_b is not None else None)


def policies(benchmark: str | None = None, small_model: str | None = None, large_model: str | None = None,
             dataset: str | None = None, profile: str | None = None, small_profile: str | None = None,
             large_profile: str | None = None, home: str | Path | None = None) -> list[LabRecord]:
    """The routing-policy lab (no model runs): per benchmark split and model pair in the store, the score and cost
    of routing policies over the stored outputs (large S, small R, MV1 -> RT, the cascade, Full RT, the oracle,
    ...), the Pareto frontier and APGR-style areas; a policy whose outputs are missing names the `mai run`
    command that stores them."""
    from mai.dashboards.policies import policy_labs
    return policy_labs(_store_with_specs(home), benchmark, small_model, large_model, dataset, profile, small_profile,
                       large_profile)


def report(run_ids: list[str] | None = None, out: str | Path = "report.html", trace_samples: int = 500,
           compare: list[str] | None = None, home: str | Path | None = None,
           tables: str | Path | None = None) -> BuiltReport:
    """Write the offline HTML report over `run_ids` (None: every completed run) built from the catalog views;
    `compare` = [run A, run B] adds run vs run (two `run_ids` alone compare those); `tables`: a folder that gets
    every table as CSV and LaTeX (booktabs). Returns its path, size in bytes, build seconds, runs, sections and the
    table files."""
    from mai.dashboards.report import build_report
    from mai.run.output_file import checked_output
    if trace_samples < 1:
        raise ConfigError("--trace-samples must be at least 1")
    store = _store_with_specs(home)
    if isinstance(out, str) and out == STDOUT:  # a Path is a file, even Path('-')
        return _report_to_stdout(store, run_ids, trace_samples, compare, tables)
    return build_report(store, run_ids, checked_output(store, Path(out), ".html"), trace_samples, compare or [],
                        Path(tables) if tables is not None else None)


STDOUT = "-"  # `--out -`, the bare string: the report goes to standard output (a file named '-' is `--out ./-`)


def _report_to_stdout(store: Home, run_ids: list[str] | None, trace_samples: int,
                      compare: list[str] | None, tables: str | Path | None = None) -> BuiltReport:
    """The report written whole to a private temp file, then copied to standard output: nothing reaches stdout
    unless the page was built."""
    import shutil
    import tempfile

    from mai.dashboards.report import build_report
    with tempfile.TemporaryDirectory(prefix="mai-report-") as scratch:
        built = build_report(store, run_ids, Path(scratch) / "report.html", trace_samples, compare or [],
                             Path(tables) if tables is not None else None)
        with open(built["path"], "rb") as page:
            sys.stdout.flush()
            shutil.copyfileobj(page, sys.stdout.buffer)
            sys.stdout.buffer.flush()
    built["path"] = STDOUT
    return built
