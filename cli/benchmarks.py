"""Commands about benchmarks, without a model: list the built-in ones and explain spec files (`mai benchmarks`),
check a spec and its data (`mai benchmark check bench.yaml`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from mai import api
from mai.dashboards.render import format_rows

# how many unusable rows `mai benchmark check` lists (all of them with --json)
ERRORS_SHOWN = 10


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = commands.add_parser("benchmarks", help="list the built-in benchmarks and explain benchmark spec files")
    listing.set_defaults(handler=_benchmarks)

    benchmark = commands.add_parser("benchmark", help="benchmark spec files: check")
    actions = benchmark.add_subparsers(required=True, metavar="ACTION")
    check = actions.add_parser("check", help="validate a spec and its data (rows, columns, answers, images) "
                                             "without loading a model")
    check.add_argument("spec", type=Path, help="the spec file (YAML)")
    check.add_argument("--data-root", help="a folder the spec may read beyond its own folder (as `mai run`)")
    check.add_argument("--no-prompt-lengths", dest="prompt_lengths", action="store_false",
                       help="skip counting the prompts' tokens (which loads the default models' tokenizers)")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=_check)


def _benchmarks(args: argparse.Namespace) -> int:
    from mai.evals.spec_check import SPEC_TEMPLATE

    rows = [(b.name, b.data, b.split, b.agreement_rule, ", ".join(b.profiles)) for b in api.benchmarks()]
    print(format_rows(["benchmark", "default data", "split", "agreement", "scorer profiles"], rows, "table"))
    print("\nYour own benchmark: a spec file (YAML) describes it, and `mai run --benchmark path/to/bench.yaml` "
          "runs it\n(as do sweep, regress, score and the deployments' `benchmark` parameter). "
          "`mai benchmark check bench.yaml`\nreads it without a model. The fields (docs/benchmarks-and-scoring.md, "
          "\"Your own benchmark\"):\n")
    print(SPEC_TEMPLATE)
    return 0


def _check(args: argparse.Namespace) -> int:
    found = api.check_benchmark(args.spec, home=args.home, prompts=args.prompt_lengths, data_root=args.data_root)
    if args.json:
        print(json.dumps({**asdict(found), "spec": found.spec.model_dump(mode="json"),
                          "version": found.spec.version}, indent=2))
        return 0 if found.usable else 1
    spec = found.spec
    print(f"benchmark {spec.name} (version {spec.version}): {spec.format}, answer_kind {spec.answer_kind}, "
          f"metric {spec.chosen_metric}")
    print(f"data {spec.data}" + (f" @ {spec.revision}" if spec.revision else ""))
    print(format_rows(["field", "column", "found"],
                      [(field, column, "yes" if ok else "no (optional)" if field in ("id", "category", "hint")
                        else "no") for field, column, ok in found.fields], "table"))
    print(f"rows {found.rows}, usable {found.usable}, errors {len(found.errors)}, images decoded {found.images}")
    print("answers: " + (", ".join(f"{k} {n}" for k, n in found.answers.items()) or "none"))
    print("categories: " + (", ".join(f"{k} {n}" for k, n in found.categories.items()) or "none"))
    _listed(found.errors)
    if found.prompts is not None:
        lengths = found.prompts
        print(f"prompt tokens (S prompt, {lengths.model}'s tokenizer, images included): min {lengths.min}, median "
              f"{lengths.median}, max {lengths.max}; context {lengths.context}")
        print(f"rows over the context (with the output budgets): {len(lengths.over_context)}")
        _listed(lengths.over_context)
    return 0 if found.usable else 1


def _listed(rows: list[tuple[str, str]]) -> None:
    for sample_id, reason in rows[:ERRORS_SHOWN]:
        print(f"  {sample_id}: {reason}")
    if len(rows) > ERRORS_SHOWN:
        print(f"  ... and {len(rows) - ERRORS_SHOWN} more (--json lists all)")
