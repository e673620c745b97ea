"""Latency commands: profile a model, import published numbers as a profile, price a stored run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mai import api
from mai.cli.options import batch_sizes_per_kind, integers, model_profiles, printing
from mai.dashboards.render import format_rows

PROFILE_COLUMNS = ["image_resolution", "image_tokens", "query_tokens", "input_tokens", "output_tokens",
                   "preprocess_ms", "vision_ms", "ttft_ms", "decode_ms", "tokens_per_s"]
ESTIMATE_COLUMNS = ["stage", "profile", "calls", "ttft_s", "decode_s", "total_s"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    imported.set_defaults(handler=printing(lambda args: api.import_profile(args.csv, args.name, args.model,
                                                                            args.hardware, args.home, args.replace)))

    priced = commands.add_parser("estimate", help="price a stored run under latency profiles (equation 27)")
    priced.add_argument("run_id")
    priced.add_argument("--small-profile")
    priced.add_argument("--large-profile")
    priced.add_argument("--profile", action="append", default=[], metavar="MODEL=PROFILE")
    priced.add_argument("--name", help="estimate name (default: the profile names joined)")
    priced.add_argument("--json", action="store_true")
    priced.set_defaults(handler=_estimate)

    timed = commands.add_parser("time", help="re-time stored runs in one regime (a timing set): recompute the "
                                "outputs they use here, batched as fresh runs batch them, and check each identical")
    timed.add_argument("run_ids", nargs="+", metavar="RUN")
    timed.add_argument("--name", help="timing set name (default: time-<UTC time>)")
    timed.add_argument("--batch-size", action="append", default=[], metavar="N|KIND=N",
                       help="batch size of every prompt kind (N) or of one (KIND=N); default: the runs' own")
    timed.set_defaults(handler=_time)


def _profile(args: argparse.Namespace) -> int:
    grid = (integers(args.resolutions, "--resolutions"), integers(args.query_tokens, "--query-tokens"),
            integers(args.output_tokens, "--output-tokens"))
    rows = api.profile(args.model, args.name, *grid, args.repeats, args.revision, args.dtype, home=args.home,
                       replace=args.replace)
    print(format_rows(PROFILE_COLUMNS, [(r["image_resolution"], r["image_tokens"], r["query_tokens"], r["input_tokens"],
                                         r["output_tokens"], r.get("preprocess_ms"), r.get("vision_ms"), r["ttft_ms"],
                                         r["decode_ms"], r["tokens_per_s"]) for r in rows], "table"))
    return 0


def _estimate(args: argparse.Namespace) -> int:
    name, stages = api.estimate(args.run_id, model_profiles(args.profile), args.small_profile, args.large_profile,
                                args.name, args.home)
    if args.json:
        print(json.dumps(stages, indent=2))
        return 0
    print(f"run {args.run_id} under '{name}' (equation 27, sequential)")
    print(format_rows(ESTIMATE_COLUMNS, [(s["stage"], s["profile"], s["calls"], s["ttft_s"], s["decode_s"],
                                          s["total_s"]) for s in stages], "table"))
    print(f"total: {sum(s['total_s'] for s in stages):.3f} s")
    return 0


def _time(args: argparse.Namespace) -> int:
    summary = api.time_runs(args.run_ids, args.name, batch_sizes_per_kind(args.batch_size), args.home)
    print(f"timing set {summary['timing_set']} (batch sizes {summary['batch_limits']})")
    print(format_rows(["run", "outputs", "identical", "measured_s"],
                      [(r["run_id"], r["outputs"], f"{r['identical']} of {r['outputs']}", r["measured_s"])
                       for r in summary["runs"]], "table"))
    return 0 if all(r["identical"] == r["outputs"] for r in summary["runs"]) else 1
