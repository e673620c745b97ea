"""Reading results without a model: compare two runs."""

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


def _compare(args: argparse.Namespace) -> int:
    result = api.compare(args.run_a, args.run_b, profile=args.profile, resamples=args.resamples, seed=args.seed,
                         home=args.home)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from mai.dashboards.compare import render_text

    print(render_text(result))
    return 0
