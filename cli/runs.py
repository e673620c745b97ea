"""Commands that run configurations: demo, run, sweep, speculative, regress, baseline, serve."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mai import api
from mai.cli.options import add_run_options, layers_and_deltas, printing, run_config
from mai.host import process_age_s

if TYPE_CHECKING:  # pydantic: imported by the commands that build a configuration
    from mai.config import RunConfig


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser("demo", help="the MAI cascade of the trained shapes pair on the shapes test split")
    demo.add_argument("--limit", type=int, default=None, help="only the first N test rows")
    demo.add_argument("--s2", action="store_true", help="with the S2 stage")
    _add_local_option(demo)
    _add_report_option(demo)
    demo.set_defaults(handler=_demo)

    run = commands.add_parser("run", help="run any configuration (cascade, single-model baseline, full RT)")
    add_run_options(run)
    _add_local_option(run)
    _add_report_option(run)
    run.set_defaults(handler=_run)

    sweep = commands.add_parser("sweep", help="sparse-RT transfer-layer (and delta) sweep: one run per setting")
    add_run_options(sweep)
    sweep.add_argument("--layers", required=True, help="comma-separated 0-based layers of the large model, e.g. 1,2,3")
    sweep.add_argument("--deltas", default=None, help="comma-separated attention shares, e.g. 0.6,0.8 (default 0.8)")
    _add_local_option(sweep)
    sweep.set_defaults(handler=_sweep)

    speculative = commands.add_parser("speculative", help="speculative-decoding baseline (small drafts, large verifies)")
    add_run_options(speculative)
    speculative.add_argument("--draft-tokens", type=int, default=4)
    _add_local_option(speculative)
    speculative.set_defaults(handler=_speculative)

    serve = commands.add_parser("serve", help="keep a vLLM server per model up across runs (--backend vllm)")
    serve.add_argument("models", nargs="+", help="built-in names, local checkpoints or hub ids")
    serve.add_argument("--revision", default="main")
    serve.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    serve.add_argument("--vllm-env", help="environment with vLLM (default $MAI_VLLM_ENV, else .venv-vllm)")
    serve.set_defaults(handler=_serve)

    regress = commands.add_parser("regress", help="run a configuration (default: the shapes pair's cascade) and exit 1 "
                                                  "if it is significantly worse than a baseline")
    add_run_options(regress)
    regress.add_argument("--baseline", help="baseline file or stored run id (default: the shipped shapes baseline)")
    regress.add_argument("--min-drop", type=float, default=1.0, help="smallest drop that counts, in points (1.0)")
    regress.add_argument("--alpha", type=float, default=0.05, help="significance level of the paired sign test")
    regress.add_argument("--require-all", action="store_true",
                         help="a baseline sample this run does not hold fails the check (default: compared over the "
                              "shared samples, with a warning)")
    _add_local_option(regress)
    regress.set_defaults(handler=_regress)

    baseline = commands.add_parser("baseline", help="write a stored run as a baseline file for `mai regress`")
    baseline.add_argument("run_id")
    baseline.add_argument("--out", type=Path, required=True)
    baseline.set_defaults(handler=printing(lambda args: api.write_baseline(args.run_id, args.out, args.home)))


def _add_local_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--local", action="store_true",
                        help="compute in this process with no Prefect (no server, no API; the run is not in the UI)")


def _add_report_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", type=Path, metavar="FILE",
                        help="also write the run's offline HTML report to FILE (otherwise built on demand: "
                             "`mai report RUN_ID`)")


def _write_report(args: argparse.Namespace, run_id: str) -> None:
    """The run's HTML report, when `--report FILE` asked for it (a run never builds it by itself)."""
    if args.report is not None:
        built = api.report([run_id], out=args.report, trace_samples=200, home=args.home)
        print(f"report:  {built['path']} ({built['bytes'] / 1e6:.1f} MB)", file=sys.stderr)


def _demo(args: argparse.Namespace) -> int:
    from mai.config import shapes_pair_config  # RunConfig is pydantic: imported by the commands that run

    manifest = api.run(shapes_pair_config(home=args.home, limit=args.limit, s2=args.s2, run_name="demo"),
                       local=args.local, startup_s=process_age_s())
    _write_report(args, manifest["run_id"])
    print(api.summary(manifest))
    command = Path(sys.argv[0]).resolve() if Path(sys.argv[0]).name == "mai" else "mai"
    print(f'\nstore:   {manifest["home"]}\ncatalog: {manifest["catalog"]}\n'
          f'try:     {command} sql --saved routing_counts   (or: {command} sql "SELECT * FROM runs")\n'
          f'report:  {command} report {manifest["run_id"]} --out report.html')
    return 0


def _run(args: argparse.Namespace) -> int:
    manifest = api.run(run_config(args), local=args.local, startup_s=process_age_s())
    _write_report(args, manifest["run_id"])
    print(json.dumps(manifest, indent=2, default=str) if args.json else api.summary(manifest))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    layers, deltas = layers_and_deltas(args.layers, args.deltas)
    manifests = api.sweep(run_config(args), layers, deltas, args.local)
    if args.json:
        print(json.dumps(manifests, indent=2, default=str))
        return 0
    for manifest in manifests:
        print(api.summary(manifest) + "\n")
    print(f"compare: {sys.argv[0]} sql --saved transfer_layer_sweep")
    return 0


def _speculative(args: argparse.Namespace) -> int:
    summary = api.speculative(run_config(args), args.draft_tokens, local=args.local)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"speculative decoding (k={summary['draft_tokens']}) against run {summary['run_id']}: "
          f"{summary['identical']}/{summary['samples']} token-identical, acceptance {summary['acceptance_rate']:.3f}, "
          f"{summary['speculative_s']:.2f} s vs plain large-model greedy {summary['plain_s']:.2f} s (batch size 1)")
    return 0


def regress_config(args: argparse.Namespace) -> RunConfig:
    """What `mai regress` runs: the shapes pair's cascade, the flags (a benchmark spec's budgets included) over it."""
    from mai.config import shapes_pair_fields

    return run_config(args, defaults={**shapes_pair_fields(), "run_name": "regression"})


def _regress(args: argparse.Namespace) -> int:
    from mai.run.baseline import RegressionDetected

    config = regress_config(args)
    try:
        result = api.regress(config, args.baseline, args.min_drop, args.alpha, args.require_all, args.local)
    except RegressionDetected as regression:
        print(str(regression))
        return 1
    print(result["report"])
    if result.get("warning"):
        print(result["warning"], file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Keep a vLLM server per model up until Ctrl-C; runs with --backend vllm on the same store find them."""
    api.serve(args.models, args.revision, args.dtype, args.vllm_env, args.home,
              say=lambda line: print(line, flush=True))
    return 0
