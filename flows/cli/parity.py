"""`mai parity RUN_A RUN_B`: the share of identical outputs and the score difference between two runs (two
backends, two batch sizes, two stores)."""

from __future__ import annotations

import argparse
import json

from mai import api


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parity = commands.add_parser("parity", help="two runs of one configuration (two backends, batch sizes or stores): "
                                                "share of identical outputs per stage, score difference")
    parity.add_argument("run_a")
    parity.add_argument("run_b")
    parity.add_argument("--home-b", help="run B's store, when it is not --home's (e.g. one store per batch size)")
    parity.add_argument("--json", action="store_true")
    parity.set_defaults(handler=_parity)


def _parity(args: argparse.Namespace) -> int:
    result = api.parity(args.run_a, args.run_b, home=args.home, home_b=args.home_b)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from mai.dashboards.parity import render_text

    print(render_text(result))
    return 0
