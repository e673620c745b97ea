"""Cascade speed: the MAI cascade against the large model's reasoning (large R), the small model's reasoning (small R)
and Full RT (small R, then RT on the large model for every sample), on the same samples.

Each run is a fresh process with a fresh store (the shapes data and the shipped pair are built before the timer
starts), so nothing is reused between runs. Reported per run: the flow's wall time (plan to manifest, from the
manifest), the engines' generation time, the whole `mai.api.run` call (with Prefect's start and the run's report),
output tokens, and the speed-up = large R's flow wall / this run's flow wall. Goal: MAI <= 1/3 of large R.

Run: `.venv/bin/python benchmarks/speedup.py [--limit N] [--batch-size N] [--compute-thread on|off]
[--image-cache on|off] [--prefix-cache on|off] [--backend transformers|vllm] [--repeats K] [--json out.json]`. Without --batch-size every run uses the shipped pair's per-kind batch sizes
(mai.config.SHAPES_BATCH_SIZES); `--batch-size 8` runs every stage at 8. `--compute-thread off` runs engine calls
in the task threads (mai/backends/compute.py explains why they do not by default); `--image-cache off` processes
every stage's images again (mai/backends/processor.py); `--prefix-cache off` prefills every prompt in full instead
of continuing from the model's cached image + question prefix (mai/backends/prefix_kv.py). Results:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from mai.backends.vllm_server import ManagedServer
    from mai.config import RunConfig
    from mai.manifest import RouteCounts
    from mai.types import BackendName, PromptKind, Role, RunMode

REPO = Path(__file__).resolve().parents[1]


class RunShape(TypedDict, total=False):
    """What a setting changes in the shipped pair's configuration (the MAI cascade without changes)."""

    mode: RunMode
    single_model: Role
    single_prompt: PromptKind


SETTINGS: dict[str, RunShape] = {
    "MAI": {},
    "large R": {"mode": "single", "single_model": "large", "single_prompt": "R"},
    "small R": {"mode": "single", "single_model": "small", "single_prompt": "R"},
    "Full RT": {"mode": "full_rt"},
}


@dataclass(frozen=True)
class StageCost:
    calls: int
    output_tokens: int
    amortised_wall_s: float


@dataclass(frozen=True)
class PrefixCacheUse:
    requests: int
    cached_prompt_tokens: int
    prompt_tokens: int


@dataclass(frozen=True)
class RunResult:
    """One run's measurement; a child process prints it as one JSON line (`asdict`), the parent reads it back."""

    setting: str
    samples: int
    routes: RouteCounts
    flow_wall_s: float
    engine_s: float
    call_s: float
    output_tokens: int
    stages: dict[str, StageCost]
    batch_sizes: dict[str, int]
    prefix_cache: dict[str, PrefixCacheUse]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(**{**data, "stages": {stage: StageCost(**cost) for stage, cost in data["stages"].items()},
                      "prefix_cache": {kind: PrefixCacheUse(**use) for kind, use in data["prefix_cache"].items()}})


def sql_int(value: object) -> int:
    """A count or a sum from DuckDB (a sum over no rows is NULL: 0)."""
    if value is None:
        return 0
    if not isinstance(value, (int, float)):
        raise TypeError(f"expected a number from the query, got {value!r}")
    return int(value)


def sql_float(value: object) -> float:
    if not isinstance(value, (int, float)):
        raise TypeError(f"expected a number from the query, got {value!r}")
    return float(value)


def run_one(setting: str, limit: int | None, batch_size: int | None, backend: BackendName) -> RunResult:
    """One run in this process, in a fresh store (called in a child process by `measure`). With vLLM the run's
    servers are started first, outside the timer, and stopped after it: no prefix cache outlives its run."""
    from mai import api
    from mai.config import shapes_pair_config
    from mai.manifest import ROUTE_LABELS

    # batch_size only when given: without it the configuration keeps the pair's per-kind sizes
    sized = {"batch_size": batch_size} if batch_size is not None else {}
    with tempfile.TemporaryDirectory(prefix="mai-speedup-") as home:
        config = shapes_pair_config(home=home, **SETTINGS[setting], limit=limit, backend=backend, **sized)
        api.plan_run(config)  # data and models, outside the timed run
        servers = start_vllm_servers(config) if backend == "vllm" else {}
        try:
            if servers:
                config = config.model_copy(update={"vllm_urls": {role: s.info.url for role, s in servers.items()
                                                                 if s.info is not None}})
            started = time.perf_counter()
            manifest = api.run(config, progress=False)
            call_s = time.perf_counter() - started
        finally:
            for server in servers.values():
                server.stop()
        costs = api.query(home, api.saved_query("stage_costs"))
        cached = api.query(home, "SELECT prompt_kind, count(*), sum(cached_prompt_tokens), sum(prompt_tokens) "
                                 "FROM generations GROUP BY 1 ORDER BY 1")[1]
    columns = costs[0]
    stages = [dict(zip(columns, row)) for row in costs[1]]
    timings = manifest["timings"]
    return RunResult(
        setting=setting, samples=sum(manifest["routes"][label] for label in ROUTE_LABELS), routes=manifest["routes"],
        flow_wall_s=timings["wall_s"], engine_s=timings["engine_generate_s"], call_s=call_s,
        output_tokens=sum(sql_int(s["output_tokens"]) for s in stages),
        stages={str(s["stage"]): StageCost(sql_int(s["calls"]), sql_int(s["output_tokens"]),
                                           sql_float(s["amortised_wall_s"])) for s in stages},
        batch_sizes={**({} if batch_size is not None else config.batch_sizes), "default": config.batch_size},
        prefix_cache={str(kind): PrefixCacheUse(sql_int(n), sql_int(hit), sql_int(total))
                      for kind, n, hit, total in cached})


def start_vllm_servers(config: RunConfig) -> dict[Role, ManagedServer]:
    """One fresh `vllm serve` per model of the run (from `.venv-vllm` or $MAI_VLLM_ENV), started together."""
    from concurrent.futures import ThreadPoolExecutor

    from mai.backends.vllm_server import ManagedServer, require_env, stop_all_started
    from mai.run.plan import prepare_run
    from mai.storage.paths import Home

    home = Home.at(config.home)
    models = prepare_run(config, home).models
    env = require_env(config.vllm_env)
    servers = {role: ManagedServer(env, model, home.root / "vllm-logs") for role, model in models.items()}
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.start(), servers.values()))
    except BaseException:
        stop_all_started()
        raise
    return servers


def measure(setting: str, limit: int | None, batch_size: int | None, compute_thread: str, image_cache: str,
            prefix_cache: str, backend: BackendName) -> RunResult:
    command = [sys.executable, __file__, "--one", setting, "--backend", backend,
               *(["--limit", str(limit)] if limit else []),
               *(["--batch-size", str(batch_size)] if batch_size else [])]
    env = {**os.environ, "MAI_COMPUTE_THREAD": compute_thread, "PREFECT_LOGGING_LEVEL": "WARNING",
           **({"MAI_IMAGE_CACHE_MB": "0"} if image_cache == "off" else {}),
           **({"MAI_PREFIX_CACHE_MB": "0"} if prefix_cache == "off" else {})}
    done = subprocess.run(command, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{setting} failed:\n{done.stderr[-3000:]}")
    return RunResult.from_json(json.loads(done.stdout.strip().splitlines()[-1]))


def table(results: dict[str, list[RunResult]]) -> str:
    reference = statistics.median(r.flow_wall_s for r in results["large R"])
    lines = ["| run | samples | flow wall (s) | engine (s) | api.run (s) | output tokens | large R wall / wall |",
             "|---|---|---|---|---|---|---|"]
    for setting, runs in results.items():
        wall = statistics.median(r.flow_wall_s for r in runs)
        engine = statistics.median(r.engine_s for r in runs)
        call = statistics.median(r.call_s for r in runs)
        lines.append(f"| {setting} | {runs[0].samples} | {wall:.2f} | {engine:.2f} | {call:.2f} | "
                     f"{runs[0].output_tokens:,} | {reference / wall:.2f} |")
    mai = results["MAI"][0].stages
    lines.append("")
    lines.append("MAI per stage (amortised wall = sum of wall / batch size): " + ", ".join(
        f"{stage} {cost.calls} calls {cost.amortised_wall_s:.2f} s" for stage, cost in sorted(mai.items())))
    cache = results["MAI"][0].prefix_cache
    if any(kind.cached_prompt_tokens for kind in cache.values()):
        lines.append("MAI prefix cache (cached / prompt tokens): " + ", ".join(
            f"{kind} {c.cached_prompt_tokens}/{c.prompt_tokens}" for kind, c in cache.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N samples of the shapes test split (480)")
    parser.add_argument("--batch-size", type=int, default=None, help="every stage at N (default: per-kind sizes)")
    parser.add_argument("--compute-thread", choices=("on", "off"), default="on")
    parser.add_argument("--image-cache", choices=("on", "off"), default="on",
                        help="off: MAI_IMAGE_CACHE_MB=0, every stage processes its images again")
    parser.add_argument("--prefix-cache", choices=("on", "off"), default="on",
                        help="off: MAI_PREFIX_CACHE_MB=0, every prompt prefilled in full (transformers backend)")
    parser.add_argument("--backend", choices=("transformers", "vllm"), default="transformers",
                        help="vllm: fresh servers per run, started before its timer (needs `make vllm-env`)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated subset of " + str(list(SETTINGS)))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", choices=list(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asdict(run_one(args.one, args.limit, args.batch_size, args.backend))))
        return
    settings = [s for s in SETTINGS if s in args.settings.split(",")]
    if "large R" not in settings or "MAI" not in settings:
        parser.error("--settings must include 'MAI' and 'large R' (the ratio's two sides)")
    from tqdm import tqdm  # type: ignore[import-untyped]

    results: dict[str, list[RunResult]] = {s: [] for s in settings}
    with tqdm(total=len(settings) * args.repeats, desc="runs", unit="run") as bar:
        for _ in range(args.repeats):
            for setting in settings:  # interleaved, so drift in the machine's load hits every setting alike
                results[setting].append(measure(setting, args.limit, args.batch_size, args.compute_thread,
                                                args.image_cache, args.prefix_cache, args.backend))
                bar.update()
    print(f"backend: {args.backend}, batch sizes: {results['MAI'][0].batch_sizes}, compute thread: "
          f"{args.compute_thread}, image cache: {args.image_cache}, prefix cache: {args.prefix_cache}, repeats: "
          f"{args.repeats} (medians)")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({s: [asdict(r) for r in runs] for s, runs in results.items()}, indent=1))


if __name__ == "__main__":
    main()
