"""Reading results without a model: the HTML report, compare two runs, the routing-policy lab, the parity of two
runs of one configuration (two backends, two batch sizes, two stores)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mai import api
from mai.errors import ConfigError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = commands.add_parser("compare", help="two stored runs sample by sample: counts, exact test, bootstrap "
                                                  "interval, per category, tokens and estimated time")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--profile", help="scorer profile (default: the benchmark's first, which every run writes)")
    compare.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    compare.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(handler=_compare)

    lab = commands.add_parser("policies", help="routing-policy lab: score and cost of routing policies combined "
                                               "from stored outputs (no model runs)")
    lab.add_argument("--benchmark", help="benchmark (default: every benchmark with a pair's run)")
    lab.add_argument("--small-model", help="the pair's small model as stored (e.g. mai-shapes-small)")
    lab.add_argument("--large-model")
    lab.add_argument("--dataset", help="dataset fingerprint (a prefix is enough)")
    lab.add_argument("--profile", help="scorer profile (default: the benchmark's first)")
    lab.add_argument("--small-profile", help="latency profile of the small model (default: the one the group's "
                                             "stored estimates used)")
    lab.add_argument("--large-profile")
    lab.add_argument("--json", action="store_true")
    lab.set_defaults(handler=_policies)

    report = commands.add_parser("report", help="one self-contained HTML file (opens offline) of the paper's figures "
                                                "and tables from the store, the policy lab and a trace browser")
    report.add_argument("run_ids", nargs="*", metavar="RUN_ID",
                        help="runs to report (default: every completed run); two runs of one benchmark add a "
                             "run-vs-run section")
    report.add_argument("--all", action="store_true", help="every completed run (the default without RUN_IDs)")
    # a string, not a Path: Path('./-') is '-', and only a bare '-' means stdout (./- is a file named '-')
    report.add_argument("--out", default="report.html",
                        help="output file (default report.html; - writes the page to stdout and the summary to "
                             "stderr; ./- is a file named '-')")
    report.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), default=[],
                        help="add the run-vs-run section (B against A); two RUN_IDs alone compare those")
    report.add_argument("--trace-samples", type=int, default=500,
                        help="most samples the trace browser holds (default 500; samples whose score differs "
                             "between runs first)")
    report.add_argument("--tables", type=Path, metavar="DIR",
                        help="also write every table to DIR as CSV and LaTeX (booktabs), with an index.csv")
    report.add_argument("--json", action="store_true", help="print what was written as JSON")
    report.set_defaults(handler=_report)

    parity = commands.add_parser("parity", help="two runs of one configuration (two backends, batch sizes or stores): "
                                                "share of identical outputs per stage, score difference")
    parity.add_argument("run_a")
    parity.add_argument("run_b")
    parity.add_argument("--home-b", help="run B's store, when it is not --home's (e.g. one store per batch size)")
    parity.add_argument("--json", action="store_true")
    parity.set_defaults(handler=_parity)


def _compare(args: argparse.Namespace) -> int:
    result = api.compare(args.run_a, args.run_b, profile=args.profile, resamples=args.resamples, seed=args.seed,
                         home=args.home)
    from mai.dashboards.compare import render_text

    print(json.dumps(result, indent=2) if args.json else render_text(result))
    return 0


def _policies(args: argparse.Namespace) -> int:
    labs = api.policies(args.benchmark, args.small_model, args.large_model, args.dataset, args.profile,
                        args.small_profile, args.large_profile, home=args.home)
    from mai.dashboards.policies import render_text

    print(json.dumps(labs, indent=2) if args.json else "\n\n".join(render_text(lab) for lab in labs))
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.all and args.run_ids:
        raise ConfigError("give RUN_IDs or --all, not both")
    built = api.report(args.run_ids or None, out=args.out, trace_samples=args.trace_samples, compare=args.compare,
                       home=args.home, tables=args.tables)
    summary = sys.stderr if built["path"] == api.STDOUT else sys.stdout  # stdout then holds the page alone
    if args.json:
        print(json.dumps(built, indent=2), file=summary)
        return 0
    print(f"{built['path']}: {built['runs']} runs, {built['bytes'] / 1e6:.1f} MB, built in {built['seconds']:.1f} s; "
          f"sections {', '.join(built['sections'])}; trace browser holds {built['trace_samples']} samples"
          + (f"; {len(built['tables'])} table files in {args.tables}" if args.tables else ""), file=summary)
    for note in built["notes"]:  # what the numbers lack (runs with outputs missing): on stderr, however --out is set
        print(f"note: {note}", file=sys.stderr)
    return 0


def _parity(args: argparse.Namespace) -> int:
    result = api.parity(args.run_a, args.run_b, home=args.home, home_b=args.home_b)
    from mai.dashboards.parity import render_text

    print(json.dumps(result, indent=2) if args.json else render_text(result))
    return 0
