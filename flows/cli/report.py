"""Reading results without a model: compare two runs, the routing-policy lab."""

from __future__ import annotations

import argparse
import json

from mai import api


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


def _compare(args: argparse.Namespace) -> int:
    result = api.compare(args.run_a, args.run_b, profile=args.profile, resamples=args.resamples, seed=args.seed,
                         home=args.home)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from mai.dashboards.compare import render_text

    print(render_text(result))
    return 0


def _policies(args: argparse.Namespace) -> int:
    labs = api.policies(args.benchmark, args.small_model, args.large_model, args.dataset, args.profile,
                        args.small_profile, args.large_profile, home=args.home)
    if args.json:
        print(json.dumps(labs, indent=2))
        return 0
    from mai.dashboards.policies import render_text

    print("\n\n".join(render_text(lab) for lab in labs))
    return 0
