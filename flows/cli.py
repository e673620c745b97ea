"""`mai` command line: run configurations, build the built-in assets, query the catalog."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

# quiet, offline-friendly Prefect defaults for an embedded (serverless) run; the user's env wins
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# the first start of the embedded Prefect API migrates a fresh database: more than the default 20 s here
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from mai.config import RunConfig, config_from_mapping, shapes_pair_config
from mai.errors import ConfigError
from mai.types import PROMPT_KINDS, RUN_MODES

if TYPE_CHECKING:
    from mai.storage.paths import Home


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        result: int = args.handler(args)
        return result
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mai", description=__doc__)
    parser.add_argument("--home", default=None, help="store root (default: $MAI_HOME or ~/.mai)")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="the MAI cascade of the trained shapes pair on the shapes test split")
    demo.add_argument("--limit", type=int, default=None, help="only the first N test rows")
    demo.add_argument("--s2", action="store_true", help="with the S2 stage")
    demo.set_defaults(handler=_demo)

    run = commands.add_parser("run", help="run any configuration (cascade, single-model baseline, full RT)")
    _add_run_options(run)
    run.set_defaults(handler=_run)

    sql = commands.add_parser("sql", help="SQL over the catalog views: samples, generations, routes, runs, metrics")
    sql.add_argument("query", nargs="?", help="a SELECT statement (or use --saved)")
    sql.add_argument("--saved", help="run a saved query from mai.dashboards by name (see --list)")
    sql.add_argument("--list", action="store_true", help="list the saved queries")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.set_defaults(handler=_sql)

    sweep = commands.add_parser("sweep", help="sparse-RT transfer-layer (and delta) sweep: one run per setting")
    _add_run_options(sweep)
    sweep.add_argument("--layers", required=True, help="comma-separated 0-based layers of the large model, e.g. 1,2,3")
    sweep.add_argument("--deltas", default=None, help="comma-separated attention shares, e.g. 0.6,0.8 (default 0.8)")
    sweep.set_defaults(handler=_sweep)

    speculative = commands.add_parser("speculative", help="speculative-decoding baseline (small drafts, large verifies)")
    _add_run_options(speculative)
    speculative.add_argument("--draft-tokens", type=int, default=4)
    speculative.set_defaults(handler=_speculative)

    score = commands.add_parser("score", help="score a JSONL file of benchmark rows with predictions (no model)")
    score.add_argument("benchmark")
    score.add_argument("--predictions", type=Path, required=True,
                       help="JSONL: one benchmark row per line in the hub's column schema plus 'prediction'")
    score.add_argument("--profile", help="scorer profile (default: the benchmark's first)")
    score.add_argument("--json", action="store_true", help="print the aggregates as JSON")
    score.add_argument("--per-line", type=Path, help="write one JSON line per input line with its score")
    score.set_defaults(handler=_score)

    rescore = commands.add_parser("rescore", help="re-score a stored run under another scorer profile (no model)")
    rescore.add_argument("run_id")
    rescore.add_argument("--profile", required=True)
    rescore.add_argument("--json", action="store_true")
    rescore.set_defaults(handler=_rescore)

    profile = commands.add_parser("profile", help="measure a model on simulated inputs into a latency profile")
    profile.add_argument("model", help="built-in name, local checkpoint or hub id")
    profile.add_argument("--name", required=True, help="profile name, e.g. tiny-large-cpu")
    profile.add_argument("--resolutions", default="256,512", help="square image sides in pixels")
    profile.add_argument("--query-tokens", default="64,256")
    profile.add_argument("--output-tokens", default="8,128")
    profile.add_argument("--repeats", type=int, default=3)
    profile.add_argument("--revision", default="main")
    profile.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    profile.add_argument("--replace", action="store_true")
    profile.set_defaults(handler=_profile)

    imported = commands.add_parser("import-profile", help="a latency profile from published numbers (CSV)")
    imported.add_argument("csv", type=Path)
    imported.add_argument("--name", required=True)
    imported.add_argument("--model", help="the CSV's rows of this model (needed when it holds several)")
    imported.add_argument("--hardware", default="published")
    imported.add_argument("--replace", action="store_true")
    imported.set_defaults(handler=_import_profile)

    priced = commands.add_parser("estimate", help="price a stored run under latency profiles (equation 27)")
    priced.add_argument("run_id")
    priced.add_argument("--small-profile")
    priced.add_argument("--large-profile")
    priced.add_argument("--profile", action="append", default=[], metavar="MODEL=PROFILE")
    priced.add_argument("--name", help="estimate name (default: the profile names joined)")
    priced.add_argument("--json", action="store_true")
    priced.set_defaults(handler=_estimate)

    models = commands.add_parser("build-models", help="build the built-in tiny model pair (offline)")
    models.add_argument("--force", action="store_true")
    models.set_defaults(handler=_build_models)

    shapes = commands.add_parser("build-shapes", help="generate the shapes benchmark's train/validation/test splits")
    shapes.add_argument("--force", action="store_true")
    shapes.set_defaults(handler=_build_shapes)

    data = commands.add_parser("build-demo", help="generate the demo benchmark (offline, seeded)")
    data.add_argument("--rows", type=int, default=None)
    data.add_argument("--seed", type=int, default=None)
    data.add_argument("--force", action="store_true")
    data.set_defaults(handler=_build_demo)

    serve = commands.add_parser("serve", help="keep a vLLM server per model up across runs (--backend vllm)")
    serve.add_argument("models", nargs="+", help="built-in names, local checkpoints or hub ids")
    serve.add_argument("--revision", default="main")
    serve.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    serve.add_argument("--vllm-env", help="environment with vLLM (default $MAI_VLLM_ENV, else .venv-vllm)")
    serve.set_defaults(handler=_serve)

    regress = commands.add_parser("regress", help="run a configuration (default: the shapes pair's cascade) and exit 1 "
                                                  "if it is significantly worse than a baseline")
    _add_run_options(regress)
    regress.add_argument("--baseline", help="baseline file or stored run id (default: the shipped shapes baseline)")
    regress.add_argument("--min-drop", type=float, default=1.0, help="smallest drop that counts, in points (1.0)")
    regress.add_argument("--alpha", type=float, default=0.05, help="significance level of the paired sign test")
    regress.set_defaults(handler=_regress)

    baseline = commands.add_parser("baseline", help="write a stored run as a baseline file for `mai regress`")
    baseline.add_argument("run_id")
    baseline.add_argument("--out", type=Path, required=True)
    baseline.set_defaults(handler=_baseline)

    catalog = commands.add_parser("catalog", help="(re)build the DuckDB catalog file and print its path")
    catalog.set_defaults(handler=_catalog)
    return parser


def _add_run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--config", type=Path, help="a JSON file of RunConfig fields; flags override it")
    run.add_argument("--benchmark")
    run.add_argument("--data", help="local Parquet / save_to_disk copy, or a hub id")
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
    run.add_argument("--batch-size", type=int)
    run.add_argument("--max-new-tokens", action="append", default=[], metavar="KIND=N",
                     help=f"output budget per prompt kind {list(PROMPT_KINDS)}, repeatable")
    run.add_argument("--name", dest="run_name")
    run.add_argument("--json", action="store_true", help="print the run manifest as JSON")


def _run_config(args: argparse.Namespace, defaults: RunConfig | None = None) -> RunConfig:
    """Flags over a --config file over `defaults` (default: RunConfig's own defaults)."""
    values: dict[str, Any] = defaults.model_dump(exclude={"home"}) if defaults else {}
    values.update(json.loads(args.config.read_text()) if args.config else {})
    for field in RunConfig.model_fields:
        value = getattr(args, field, None)
        if value is not None and field != "max_new_tokens":
            values[field] = value
    if args.max_new_tokens:
        budgets = dict(values.get("max_new_tokens", {}))
        for item in args.max_new_tokens:
            kind, _, number = item.partition("=")
            if not number.isdigit():
                raise ConfigError(f"--max-new-tokens expects KIND=N, got '{item}'")
            budgets[kind] = int(number)
        values["max_new_tokens"] = budgets
    if args.vllm_url:
        values["vllm_urls"] = {**values.get("vllm_urls", {}), **_role_urls(args.vllm_url)}
    values["home"] = args.home
    return config_from_mapping(values)


def _role_urls(items: list[str]) -> dict[str, str]:
    urls = {}
    for item in (part for value in items for part in value.split(",") if part.strip()):
        role, _, url = item.partition("=")
        if role not in ("small", "large") or not url:
            raise ConfigError(f"--vllm-url expects small=URL or large=URL, got '{item}'")
        urls[role] = url
    return urls


def _serve(args: argparse.Namespace) -> int:
    """Keep a vLLM server per model up until Ctrl-C; runs with --backend vllm on the same store find them."""
    from mai.flows.assets import build_models
    from mai.storage.paths import Home

    from mai.backends.vllm_server import require_env, serve_forever
    from mai.config import BUILTIN_MODELS, resolve_model

    home = Home.at(args.home)
    env = require_env(args.vllm_env)
    if set(args.models) & set(BUILTIN_MODELS):
        build_models(home)
    models = [resolve_model(name, args.revision, args.dtype, home.models) for name in args.models]
    print(f"starting {len(models)} vLLM server(s) from {env}; Ctrl-C stops them", flush=True)
    serve_forever(env, models, home.root, on_ready=lambda line: print(line, flush=True))
    return 0


def _run(args: argparse.Namespace) -> int:
    manifest = execute(_run_config(args))
    print(json.dumps(manifest, indent=2, default=str) if args.json else render_summary(manifest))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from mai.flows.assets import ensure_builtin_assets
    from mai.flows.plan import prepare_run
    from mai.flows.progress_bar import ProgressBar
    from mai.flows.sweep import mai_sweep
    from mai.storage.paths import Home

    try:
        layers = [int(x) for x in args.layers.split(",") if x.strip()]
        deltas = [float(x) for x in args.deltas.split(",")] if args.deltas else None
    except ValueError as error:
        raise ConfigError(f"--layers takes integers and --deltas numbers, comma-separated: {error}") from error
    config = _run_config(args)
    _quiet_library_progress_bars()
    home = Home.at(config.home)
    ensure_builtin_assets(config, home)
    for layer in layers:  # every variant is validated before anything loads
        for delta in deltas or [config.transfer_delta]:
            prepare_run(config.model_copy(update={"transfer": "sparse", "transfer_layer": layer,
                                                  "transfer_delta": delta, "capture_layers": layers}), home)
    with ProgressBar():
        manifests = mai_sweep(config, layers, deltas)
    if args.json:
        print(json.dumps(manifests, indent=2, default=str))
    else:
        for manifest in manifests:
            print(render_summary(manifest) + "\n")
        print(f"compare: {sys.argv[0]} sql --saved transfer_layer_sweep")
    return 0


def _speculative(args: argparse.Namespace) -> int:
    from mai.flows.assets import ensure_builtin_assets
    from mai.flows.plan import prepare_run
    from mai.flows.speculative import mai_speculative
    from mai.storage.paths import Home

    config = _run_config(args)
    _quiet_library_progress_bars()
    home = Home.at(config.home)
    ensure_builtin_assets(config, home)
    prepare_run(config.model_copy(update={"mode": "cascade", "s2": False}), home)
    summary = mai_speculative(config, args.draft_tokens)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"speculative decoding (k={summary['draft_tokens']}) against run {summary['run_id']}: "
              f"{summary['identical']}/{summary['samples']} token-identical, acceptance {summary['acceptance_rate']:.3f}, "
              f"{summary['speculative_s']:.2f} s vs plain large-model greedy {summary['plain_s']:.2f} s (batch size 1)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    config = shapes_pair_config(home=args.home, limit=args.limit, s2=args.s2, run_name="demo")
    manifest = execute(config)
    print(render_summary(manifest))
    command = Path(sys.argv[0]).resolve() if Path(sys.argv[0]).name == "mai" else "mai"
    print(f'\nstore:   {manifest["home"]}\ncatalog: {manifest["catalog"]}\n'
          f'try:     {command} sql --saved routing_counts   (or: {command} sql "SELECT * FROM runs")')
    return 0


def execute(config: RunConfig) -> dict[str, Any]:
    """Validate (before any model loads), then run the flow with a progress bar on the terminal."""
    from mai.flows.progress_bar import ProgressBar
    from mai.flows.run import mai_run

    home = prepare_for_terminal(config)
    with ProgressBar():
        manifest = mai_run(config)
    manifest["home"], manifest["catalog"] = str(home.root), str(home.catalog)
    return manifest


def prepare_for_terminal(config: RunConfig) -> Home:
    """What every command that runs a configuration does first: quiet the libraries' own progress bars, build
    the built-in models and data the configuration names, and validate it, so a bad one fails before any
    model loads."""
    from mai.flows.assets import ensure_builtin_assets
    from mai.flows.plan import prepare_run
    from mai.storage.paths import Home

    _quiet_library_progress_bars()
    home = Home.at(config.home)
    ensure_builtin_assets(config, home)
    prepare_run(config, home)
    return home


def _quiet_library_progress_bars() -> None:
    """Our bar shows the work; the libraries' per-file bars (weights, parquet) are noise around it."""
    import datasets
    from transformers.utils import logging as transformers_logging

    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()


def render_summary(manifest: dict[str, Any]) -> str:
    counts, timings, routes = manifest["counts"], manifest["timings"], manifest["routes"]
    lines = [f"run {manifest['run_id']} ({manifest['config']['mode']}, {manifest['config']['benchmark']})"]
    lines.append("routing: " + "  ".join(f"{k}={v}" for k, v in routes.items() if v or k in ("MV1", "MV2", "RT")))
    lines += [f"{m['metric']}[{m['subset']}] = {m['value']:.4f} (n={m['n']})" for m in manifest["metrics"]
              if m["subset"] == "overall"]
    lines.append("output tokens per stage: " + "  ".join(
        f"{name}={int(s['output_tokens'])} ({s['mean_output_tokens']:.1f}/gen)" for name, s in manifest["stages"].items()))
    lines.append(f"generations: {counts['generations_computed']} computed, {counts['generations_reused']} reused "
                 f"(of {counts['generations_needed']})")
    lines.append(f"samples: {counts['valid']} valid, {counts['errors']} with errors")
    lines += [f"  error {e['sample_id']}: {e['error']}" for e in manifest["errors"][:10]]
    lines.append(f"wall time: {timings['wall_s']:.1f} s (model generate {timings['engine_generate_s']:.1f} s, "
                 f"model load {timings['model_load_s']:.1f} s)")
    backend = manifest.get("backend") or {}
    for server in backend.get("servers", []):
        lines.append(f"vLLM {server['model']}: {server['url']} ({server['owner']}), log {server['log_path']}")
    if backend.get("servers") or backend.get("restarts"):
        lines.append(f"vLLM server restarts during the run: {backend['restarts']}")
    return "\n".join(lines)


def _sql(args: argparse.Namespace) -> int:
    from mai.dashboards.saved import list_saved, load_saved
    from mai.storage.catalog import query
    from mai.storage.paths import Home

    if args.list:
        for name, description in list_saved():
            print(f"{name:28s} {description}")
        return 0
    sql = load_saved(args.saved) if args.saved else args.query
    if not sql:
        raise ConfigError("give a query, or --saved NAME (see `mai sql --list`)")
    columns, rows = query(Home.at(args.home), sql)
    print(format_rows(columns, rows, args.format))
    return 0


def format_rows(columns: list[str], rows: list[tuple[object, ...]], style: str) -> str:
    if style == "json":
        return json.dumps([dict(zip(columns, row)) for row in rows], indent=2, default=str)
    if style == "csv":
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines + [f"({len(rows)} rows)"])


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "NULL" if value is None else str(value)


def _score(args: argparse.Namespace) -> int:
    from mai.benchmarks.registry import get_benchmark
    from mai.scoring import check_profile, read_prediction_lines, score_outputs

    benchmark = get_benchmark(args.benchmark)
    profile = check_profile(benchmark, args.profile)
    if not args.predictions.exists():
        raise ConfigError(f"predictions file '{args.predictions}' does not exist")
    lines = read_prediction_lines(benchmark, args.predictions.read_text().splitlines())
    usable = [(line.sample, line.prediction) for line in lines if line.sample is not None]
    scored, metrics = score_outputs(benchmark, usable, profile)
    errors = [{"line": line.line, "error": line.error} for line in lines if line.sample is None]
    if args.per_line:
        by_line = iter(scored)
        with args.per_line.open("w") as handle:
            for line in lines:
                item = next(by_line) if line.sample is not None else None
                record = ({"line": line.line, "sample_id": item.sample.sample_id, "parsed": item.parsed,
                           "score": item.score} if item else {"line": line.line, "error": line.error})
                handle.write(json.dumps(record) + "\n")
    result = {"benchmark": benchmark.name, "scorer_profile": profile, "scored": len(scored), "errors": errors,
              "metrics": [m.__dict__ for m in metrics]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{benchmark.name} ({profile}): {len(scored)} scored, {len(errors)} unusable lines")
        print(format_rows(["metric", "subset", "value", "n"], [(m.name, m.subset, m.value, m.n) for m in metrics],
                          "table"))
        for error in errors[:10]:
            print(f"  line {error['line']}: {error['error']}")
    return 0


def _rescore(args: argparse.Namespace) -> int:
    from mai.flows.rescore import mai_rescore

    result = mai_rescore(args.run_id, args.profile, args.home)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        rows = [(m["metric"], m["subset"], m["value"], m["n"]) for m in result["metrics"]]
        print(f"run {result['run_id']} re-scored with profile {result['scorer_profile']}")
        print(format_rows(["metric", "subset", "value", "n"], rows, "table"))
    return 0


def _integers(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise ConfigError(f"{option} takes comma-separated integers, got '{text}'") from error


def _profile(args: argparse.Namespace) -> int:
    from mai.flows.latency import mai_profile

    _quiet_library_progress_bars()
    rows = mai_profile(args.model, args.name, _integers(args.resolutions, "--resolutions"),
                       _integers(args.query_tokens, "--query-tokens"), _integers(args.output_tokens, "--output-tokens"),
                       args.repeats, args.revision, args.dtype, home=args.home, replace=args.replace)
    columns = ["image_resolution", "image_tokens", "query_tokens", "input_tokens", "output_tokens", "preprocess_ms",
               "vision_ms", "ttft_ms", "decode_ms", "tokens_per_s"]
    print(format_rows(columns, [tuple(r[c] for c in columns) for r in rows], "table"))
    return 0


def _import_profile(args: argparse.Namespace) -> int:
    from mai.storage.latency import rows_from_csv, write_profile
    from mai.storage.paths import Home

    rows = rows_from_csv(args.csv, args.hardware)
    models = sorted({r["model"] for r in rows})
    if args.model:
        rows = [r for r in rows if r["model"] == args.model]
    elif len(models) > 1:
        raise ConfigError(f"{args.csv} holds several models {models}: pick one with --model")
    if not rows:
        raise ConfigError(f"no rows for model '{args.model}' in {args.csv} (models: {models})")
    print(write_profile(Home.at(args.home), args.name, rows, replace=args.replace))
    return 0


def _estimate(args: argparse.Namespace) -> int:
    from mai.flows.latency import mai_estimate
    from mai.storage.catalog import query
    from mai.storage.paths import Home

    home = Home.at(args.home)
    mapping = {}
    for item in args.profile:
        model, _, profile = item.partition("=")
        if not profile:
            raise ConfigError(f"--profile expects MODEL=PROFILE, got '{item}'")
        mapping[model] = profile
    if args.small_profile or args.large_profile:
        _, rows = query(home, f"SELECT small_model, large_model FROM runs WHERE run_id = '{args.run_id}'")
        if not rows:
            raise ConfigError(f"no completed run '{args.run_id}'")
        for model, profile in zip(rows[0], (args.small_profile, args.large_profile)):
            if model and profile:
                mapping[str(model)] = profile
    name = args.name or "+".join(sorted(set(mapping.values())))
    stages = mai_estimate(args.run_id, mapping, name, args.home)
    if args.json:
        print(json.dumps(stages, indent=2))
    else:
        columns = ["stage", "profile", "calls", "ttft_s", "decode_s", "total_s"]
        print(f"run {args.run_id} under '{name}' (equation 27, sequential)")
        print(format_rows(columns, [tuple(s[c] for c in columns) for s in stages], "table"))
        print(f"total: {sum(s['total_s'] for s in stages):.3f} s")
    return 0


def _build_models(args: argparse.Namespace) -> int:
    from mai.flows.assets import build_models
    from mai.storage.paths import Home

    for path in build_models(Home.at(args.home), force=args.force):
        print(path)
    return 0


def _regress(args: argparse.Namespace) -> int:
    from mai.flows.progress_bar import ProgressBar
    from mai.flows.regression import RegressionDetected, default_baseline, load_baseline, mai_regression
    from mai.storage.paths import Home

    config = _run_config(args, defaults=shapes_pair_config(run_name="regression"))
    load_baseline(Home.at(config.home), args.baseline or str(default_baseline()))  # fails fast on a missing baseline
    prepare_for_terminal(config)
    try:
        with ProgressBar():
            result = mai_regression(config, args.baseline, args.min_drop, args.alpha)
    except RegressionDetected as regression:
        print(str(regression))
        return 1
    print(result["report"])
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from mai.flows.regression import baseline_file
    from mai.storage.paths import Home

    home = Home.at(args.home)
    if not (home.runs / args.run_id / "manifest.json").exists():
        raise ConfigError(f"no completed run '{args.run_id}' in {home.root}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(baseline_file(home, args.run_id), indent=1) + "\n")
    print(args.out)
    return 0


def _build_shapes(args: argparse.Namespace) -> int:
    from mai.flows.assets import build_shapes_dataset
    from mai.storage.paths import Home

    print(build_shapes_dataset(Home.at(args.home), force=args.force))
    return 0


def _build_demo(args: argparse.Namespace) -> int:
    from mai.flows.assets import DEMO_ROWS, DEMO_SEED, build_demo_dataset
    from mai.storage.paths import Home

    path = build_demo_dataset(Home.at(args.home), n=args.rows or DEMO_ROWS, seed=args.seed or DEMO_SEED,
                              force=args.force)
    print(path)
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from mai.storage.catalog import build_catalog
    from mai.storage.paths import Home

    print(build_catalog(Home.at(args.home)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
