"""Commands that build the built-in assets offline: the tiny model pair, the shapes and demo benchmarks."""

from __future__ import annotations

import argparse

from mai import api
from mai.cli.options import printing


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = commands.add_parser("build-models", help="build the built-in tiny model pair (offline)")
    models.add_argument("--force", action="store_true")
    models.set_defaults(handler=_build_models)

    shapes = commands.add_parser("build-shapes", help="generate the shapes benchmark's train/validation/test splits")
    shapes.add_argument("--force", action="store_true")
    shapes.set_defaults(handler=printing(lambda args: api.build_shapes(args.home, force=args.force)))

    data = commands.add_parser("build-demo", help="generate the demo benchmark (offline, seeded)")
    data.add_argument("--rows", type=int, default=None)
    data.add_argument("--seed", type=int, default=None)
    data.add_argument("--force", action="store_true")
    data.set_defaults(handler=printing(lambda args: api.build_demo(args.home, rows=args.rows, seed=args.seed,
                                                                    force=args.force)))


def _build_models(args: argparse.Namespace) -> int:
    for path in api.build_models(args.home, force=args.force):
        print(path)
    return 0

