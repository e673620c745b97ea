"""vLLM backend vs transformers backend on the tiny pair (results in docs/benchmarks.md).

One process, one fresh store root per backend, the same samples and configuration (MAI cascade with S2,
the demo's output budgets, float32):
1. server start time: both `vllm serve` processes started concurrently from the vLLM environment, each
   timed from spawn to a healthy /health;
2. the full cascade with the transformers backend (in-process; model load included);
3. the full cascade with the vLLM backend on those (warm) servers;
then samples per second of both runs, how many generations are token-identical, and the prefix-cache hit
rate of S2 and RT requests (share of requests with cached prompt tokens, and cached / prompt tokens).

Run: `.venv/bin/python benchmarks/vllm_vs_transformers.py [--rows 96] [--home DIR]` (or `make bench-vllm`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mai.config import RunConfig
    from mai.manifest import RouteCounts, RunManifest
    from mai.storage.paths import Home

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@dataclass(frozen=True)
class BackendRun:
    wall_s: float
    call_s: float
    samples_per_s: float


@dataclass(frozen=True)
class TransformersRun(BackendRun):
    model_load_s: float


@dataclass(frozen=True)
class PrefixCacheHits:
    """One prompt kind's vLLM prefix-cache use: requests, those with cached prompt tokens, cached / prompt tokens."""

    requests: int
    requests_with_hits: int
    hit_rate: float
    cached_token_share: float


@dataclass(frozen=True)
class BackendComparison:
    samples: int
    shards: int
    batch_size: int
    cpu: str
    cores: int | None
    models: dict[str, str]
    routes: RouteCounts
    server_start_s: dict[str, float]
    transformers: TransformersRun
    vllm: BackendRun
    identical_generations: str
    same_routes_and_metrics: bool
    prefix_cache: dict[str, PrefixCacheHits]


def prepare_home(root: Path, rows: int) -> Home:
    from mai.run.assets import build_demo_dataset, build_models
    from mai.storage.paths import Home

    home = Home.at(root)
    build_models(home)
    build_demo_dataset(home, n=rows, force=True)
    return home


def vllm_pair(home: Home) -> dict[str, str]:
    """The built-in pair, or a head-size-32 stand-in for a model vLLM's CPU attention cannot run (as in
    tests/test_vllm_backend.py)."""
    from mai.backends.vllm_backend import CPU_HEAD_SIZES
    from mai.config import RunConfig, resolve_model

    models: dict[str, str] = {}
    for role in ("small", "large"):
        models[f"{role}_model"] = getattr(RunConfig(), f"{role}_model")
        spec = resolve_model(models[f"{role}_model"], "main", "float32", home.models)
        config = json.loads((Path(spec.name_or_path) / "config.json").read_text())["text_config"]
        if config["head_dim"] not in CPU_HEAD_SIZES:
            from mai.backends.tiny_models import LARGE_NAME, build_variant

            variant = home.models / f"mai-tiny-{role}-hd32"
            if not (variant / "config.json").exists():
                build_variant(home.models, variant.name, size=LARGE_NAME, seed=5)
            models[f"{role}_model"] = str(variant)
    return models


def timed_run(config: RunConfig) -> tuple[RunManifest, float]:
    from mai.flows.run import mai_run

    started = time.perf_counter()
    manifest = mai_run(config)
    return manifest, time.perf_counter() - started


def prefix_cache(home: Home) -> dict[str, PrefixCacheHits]:
    from mai.storage.catalog import query

    _, rows = query(home, "SELECT prompt_kind, count(*), count(*) FILTER (WHERE cached_prompt_tokens > 0), "
                          "sum(cached_prompt_tokens), sum(prompt_tokens) FROM generations GROUP BY ALL ORDER BY 1")
    hits = {}
    for kind, *counts in rows:
        n, with_hits, cached, prompt = (_integer(value) for value in counts)
        hits[str(kind)] = PrefixCacheHits(n, with_hits, round(with_hits / n, 3), round(cached / prompt, 3))
    return hits


def _integer(value: object) -> int:
    """A count or a sum of token counts from DuckDB."""
    if not isinstance(value, int):
        raise TypeError(f"expected an integer from the query, got {value!r}")
    return value


def identical(home_a: Home, home_b: Home) -> tuple[int, int]:
    """Outputs of store B equal to store A's for the same request. Paired by (sample, model, prompt kind): the two
    backends' identities differ (each names its backend, mai.identity)."""
    import pyarrow.parquet as pq

    columns = ["sample_id", "model", "prompt_kind", "text", "output_token_ids"]

    def rows(home: Home) -> dict[tuple[str, str, str], tuple[str, tuple[int, ...]]]:
        files = sorted(home.generations.glob("*/*/*.parquet"))
        return {(r["sample_id"], r["model"], r["prompt_kind"]): (r["text"], tuple(r["output_token_ids"]))
                for f in files for r in pq.read_table(f, columns=columns).to_pylist()}

    a, b = rows(home_a), rows(home_b)
    return sum(1 for g in a if b.get(g) == a[g]), len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=96)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--home", type=Path, default=None, help="parent directory of the two store roots")
    args = parser.parse_args()

    from mai.backends import vllm_server
    from mai.backends.registry import clear_engines
    from mai.config import DEMO_MAX_NEW_TOKENS, RunConfig, resolve_model

    parent = args.home or Path(tempfile.mkdtemp(prefix="mai-bench-vllm-"))
    home_t, home_v = prepare_home(parent / "transformers", args.rows), prepare_home(parent / "vllm", args.rows)
    pair = vllm_pair(home_v)
    vllm_pair(home_t)
    base = {"s2": True, "shards": args.shards, "max_new_tokens": DEMO_MAX_NEW_TOKENS, **pair}

    env = vllm_server.require_env()
    specs = [resolve_model(pair[f"{role}_model"], "main", "float32", home_v.models) for role in ("small", "large")]
    servers = [vllm_server.ManagedServer(env, spec, vllm_server.log_dir(home_v.root)) for spec in specs]
    with ThreadPoolExecutor(max_workers=2) as pool:
        infos = list(pool.map(lambda s: s.start(), servers))
    try:
        transformers, transformers_s = timed_run(RunConfig(home=str(home_t.root), backend="transformers", **base))
        urls = {"small": infos[0].url, "large": infos[1].url}
        vllm, vllm_s = timed_run(RunConfig(home=str(home_v.root), backend="vllm", vllm_urls=urls, **base))
    finally:
        clear_engines()
        for server in servers:
            server.stop()
    same, total = identical(home_t, home_v)
    samples = transformers["counts"]["valid"]
    report = BackendComparison(
        samples=samples, shards=args.shards, batch_size=RunConfig().batch_size,
        cpu=platform.processor() or platform.machine(), cores=os.cpu_count(),
        models={k: Path(v).name for k, v in pair.items()}, routes=transformers["routes"],
        server_start_s={info.model: round(info.start_s or 0.0, 1) for info in infos},
        transformers=TransformersRun(wall_s=round(transformers["timings"]["wall_s"], 2),
                                     call_s=round(transformers_s, 2),
                                     samples_per_s=round(samples / transformers["timings"]["wall_s"], 2),
                                     model_load_s=round(transformers["timings"]["model_load_s"], 2)),
        vllm=BackendRun(wall_s=round(vllm["timings"]["wall_s"], 2), call_s=round(vllm_s, 2),
                        samples_per_s=round(samples / vllm["timings"]["wall_s"], 2)),
        identical_generations=f"{same}/{total}",
        same_routes_and_metrics=vllm["routes"] == transformers["routes"]
        and vllm["metrics"] == transformers["metrics"],
        prefix_cache=prefix_cache(home_v),
    )
    print(json.dumps(asdict(report), indent=2))


if __name__ == "__main__":
    main()
