"""Commands over the store without a model: sql, catalog, score, rescore, store (compact, stats, verify)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from mai import api
from mai.cli.options import printing
from mai.dashboards.render import format_chunks, format_rows
from mai.errors import ConfigError
from mai.scoring import split_jsonl
from mai.storage.filesystem_check import MIN_FREE_GIB, check_store
from mai.storage.paths import Home

METRIC_COLUMNS = ["metric", "subset", "value", "n"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sql = commands.add_parser("sql", help="SQL over the catalog views: samples, generations, routes, runs, metrics")
    sql.add_argument("query", nargs="?", help="a SELECT statement (or use --saved)")
    sql.add_argument("--saved", help="run a saved query from mai.dashboards by name (see --list)")
    sql.add_argument("--list", action="store_true", help="list the saved queries")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.add_argument("--timeout", type=float, default=api.QUERY_TIMEOUT_S, metavar="SECONDS",
                     help=f"stop the query after this long (default {api.QUERY_TIMEOUT_S:g})")
    sql.add_argument("--memory-limit", default=api.QUERY_MEMORY_LIMIT, metavar="SIZE",
                     help=f"DuckDB's memory limit for the query, such as 2GB (default {api.QUERY_MEMORY_LIMIT})")
    sql.set_defaults(handler=_sql)

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

    catalog = commands.add_parser("catalog", help="(re)build the DuckDB catalog file and print its path")
    catalog.set_defaults(handler=printing(lambda args: api.catalog(args.home)))

    store = commands.add_parser("store", help="store maintenance: compact, stats, verify, check")
    actions = store.add_subparsers(required=True, metavar="ACTION")
    compact = actions.add_parser("compact", help="merge small batch files into large ones, remove duplicates")
    compact.add_argument("--min-files", type=int, default=2, help="compact a partition from this many small files")
    compact.add_argument("--json", action="store_true")
    compact.set_defaults(handler=_store_compact)
    stats = actions.add_parser("stats", help="rows, files and bytes per table")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(handler=_store_stats)
    verify = actions.add_parser("verify", help="check that every file reads, schemas, identities, references, "
                                               "manifests, temp files (exit 1 on a problem)")
    verify.add_argument("--json", action="store_true")
    verify.add_argument("--repair", action="store_true",
                        help="move damaged files into the store's quarantine folder (never deletes one), remove the "
                             "orphan temp files that killed writers or a full disk left, rebuild the catalog, and say "
                             "what the next run computes again")
    verify.set_defaults(handler=_store_verify, notes_unreadable=False)
    check = actions.add_parser("check", help="test on this host what the store needs from its filesystem: locks "
                                             "across processes, lock mount options, atomic rename, symlinks, fsync, "
                                             "free space (exit 1 on a failure)")
    # SUPPRESS: without it, the subcommand's default would hide `mai --home PATH store check`
    check.add_argument("--home", default=argparse.SUPPRESS, help="the store's mounted path (default: as `mai --home`)")
    check.add_argument("--min-free-gb", type=float, default=MIN_FREE_GIB, metavar="GIB",
                       help=f"free space below this fails (default {MIN_FREE_GIB:g})")
    check.add_argument("--pool", metavar="POOL",
                       help="also prove locks between hosts: a probe flow run on each worker of this work pool (the "
                            "server of PREFECT_API_URL) holds a lock in the store while the others try it")
    check.add_argument("--probe-deployment", default="mai-store-probe/probe", metavar="NAME",
                       help="the probe's deployment on POOL (default mai-store-probe/probe, from prefect.yaml)")
    check.set_defaults(handler=_store_check, notes_unreadable=False)


def _sql(args: argparse.Namespace) -> int:
    if args.list:
        for name, description in api.saved_queries():
            print(f"{name:28s} {description}")
        return 0
    sql = api.saved_query(args.saved) if args.saved else args.query
    if not sql:
        raise ConfigError("give a query, or --saved NAME (see `mai sql --list`)")
    # within the query's limits from the command's start to its last line: the worker takes at most
    # `mai.storage.query_results.FOR_PRINTING` of the result, and formatting it stops at the timeout, before anything
    # is written (a stopped command prints no half result)
    started = time.monotonic()
    columns, rows = api.query(args.home, sql, args.timeout, args.memory_limit, for_printing=True)
    pieces: list[str] = []
    for piece in format_chunks(columns, rows, args.format):
        if time.monotonic() - started > args.timeout:
            raise ConfigError(f"the query was stopped after {args.timeout:g} s, while its {len(rows):,} rows were "
                              "formatted (raise the limit with --timeout, or narrow the result)")
        pieces.append(piece)
    sys.stdout.write("".join(pieces) + "\n")
    return 0


def _score(args: argparse.Namespace) -> int:
    report = api.score(args.benchmark, _lines(args.predictions), args.profile)
    if args.per_line:
        with args.per_line.open("w") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in report.per_line)
    result = report.summary
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['benchmark']} ({result['scorer_profile']}): {result['scored']} scored, "
          f"{len(result['errors'])} unusable lines")
    print(format_rows(METRIC_COLUMNS, [(m["name"], m["subset"], m["value"], m["n"]) for m in result["metrics"]],
                      "table"))
    for error in result["errors"][:10]:
        print(f"  line {error['line']}: {error['error']}")
    return 0


def _lines(path: Path) -> Iterator[bytes]:
    """Read lazily: a bad benchmark or profile is reported before a missing file, as it always was. Bytes: a
    line that is not UTF-8 becomes that line's error, not a traceback (mai.scoring.split_jsonl)."""
    if not path.exists():
        raise ConfigError(f"predictions file '{path}' does not exist")
    yield from split_jsonl(path.read_bytes())


def _rescore(args: argparse.Namespace) -> int:
    result = api.rescore(args.run_id, args.profile, args.home)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    rows = [(m["metric"], m["subset"], m["value"], m["n"]) for m in result["metrics"]]
    print(f"run {result['run_id']} re-scored with profile {result['scorer_profile']}")
    print(format_rows(METRIC_COLUMNS, rows, "table"))
    return 0


def _store_compact(args: argparse.Namespace) -> int:
    reports = [asdict(r) for r in api.store_compact(args.home, min_small_files=args.min_files)]
    columns = ["partition", "files_before", "files_after", "rows_merged", "duplicates_removed", "seconds", "skipped"]
    print(json.dumps(reports, indent=2) if args.json else
          format_rows(columns, [tuple(r[c] for c in columns) for r in reports], "table"))
    return 0


def _store_stats(args: argparse.Namespace) -> int:
    stats = [asdict(s) for s in api.store_stats(args.home)]
    columns = ["table", "partitions", "files", "rows", "bytes"]
    print(json.dumps(stats, indent=2) if args.json else
          format_rows(columns, [tuple(s[c] for c in columns) for s in stats], "table"))
    return 0


def _store_verify(args: argparse.Namespace) -> int:
    """Exit status 1 when the store has a problem (CI can gate on it)."""
    report = api.store_verify(args.home, repair=args.repair)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for line in report["repaired"]:
            print(f"  repaired: {line}")
        print(f"checked {report['checked_files']} files: {len(report['problems'])} problems")
        for line in report["problems"]:
            print(f"  problem: {line}")
        for line in report["notes"]:
            print(f"  note: {line}")
        for line in report["next_run"]:
            print(f"  next run: {line}")
    return 1 if report["problems"] else 0


def _store_check(args: argparse.Namespace) -> int:
    """One line per need, PASS or FAIL with what it means, then what this host could not prove; exit status 1 and
    what to fix when one failed."""
    home = Home.at(args.home)
    report = check_store(home.root, args.min_free_gb)
    print(f"store {home.root}")
    for check in report.checks:
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.meaning}")
    failed = [f"{c.name}: {c.fix}" for c in report.failed]
    proven_across = False
    if args.pool:
        pool_failed, proven_across = _check_pool(home, args.pool, args.probe_deployment)
        failed += pool_failed
    else:
        for line in report.unproven:
            print(f"NOT PROVEN  {line}")
    if failed:
        print(f"store check failed: {'; '.join(failed)}", file=sys.stderr)
        return 1
    if proven_across:
        print(f"store check passed on this host and across the hosts of pool {args.pool}")
        return 0
    if args.pool:  # the probe passed, but its hosts were one machine: nothing was shown between machines
        print(f"store check passed on this host; locks between the machines of pool {args.pool} are NOT PROVEN: its "
              "workers ran on one machine")
        return 0
    # the verdict claims only what was proven: this host's processes, not other hosts'
    print("store check passed for the processes of this host; locks between hosts are NOT PROVEN: run `mai store "
          "check --pool POOL` with a worker on each host that mounts the store")
    return 0


def _check_pool(home: Home, pool: str, deployment: str) -> tuple[list[str], bool]:
    """The line of the probe across the pool's hosts; what to fix when it failed, and whether it proved that locks
    exclude each other between machines (not where every host ran on one machine's kernel)."""
    from mai.flows.cross_host_check import probe_pool

    probe = probe_pool(home, pool, deployment)
    if probe.leaks:
        print(f"FAIL  locks between hosts: {'; '.join(probe.leaks)}: the locks of these hosts do not exclude each "
              "other's processes, so they would compute the same outputs")
        return [("locks between hosts: mount the store on those hosts with locks the server holds (NFS without "
                "local_lock/nolock, Lustre with flock; a FUSE filesystem that forwards locks), or keep their workers "
                "off this store")], False
    if probe.missing or len(probe.hosts) < 2:
        print(f"FAIL  locks between hosts: the probe did not complete on every worker of pool {pool} ("
              f"{'; '.join(probe.missing) or 'fewer than two hosts took part'})")
        return ["locks between hosts: see the probe's flow runs (lock-probe-*) in the Prefect UI"], False
    if probe.one_kernel:
        print(f"NOT PROVEN  locks between hosts: hosts {', '.join(probe.hosts)} of pool {pool} run on one machine (one "
              "kernel boot id): none took another's lock, but locks on one kernel exclude each other whatever the "
              "filesystem does between machines; run the probe with the pool's workers on separate machines")
        return [], False
    print(f"PASS  locks between hosts: hosts {', '.join(probe.hosts)} of pool {pool} each held a lock in the store "
          "while the others tried it, and none took another's")
    return [], True
