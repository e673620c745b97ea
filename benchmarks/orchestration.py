"""Orchestration cost of the MAI flow on the demo benchmark (results in docs/benchmarks.md).

(a) overhead  = run wall time / sum of engine generate time        goal <= 1.15 at >= 200 samples
(b) cached    = wall time of an identical re-run / first run         goal <= 5 %
(c) S2 toggle = wall time of the same run with S2 / first run

Run: `.venv/bin/python benchmarks/orchestration.py [--rows 240] [--home DIR]`. Uses a fresh store root
(the built-in models and demo data are built there), the embedded Prefect API and the CLI's defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mai.config import RunConfig
    from mai.manifest import RouteCounts, RunManifest

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


@dataclass(frozen=True)
class OrchestrationCost:
    """Three runs on one store: the first, an identical re-run (all cached) and the first with S2 toggled on."""

    samples: int
    shards: int
    cpu: str
    cores: int | None
    routes: RouteCounts
    first_run_wall_s: float
    first_run_call_s: float
    engine_generate_s: float
    model_load_s: float
    overhead: float
    overhead_excluding_model_load: float
    cached_rerun_wall_s: float
    cached_rerun_share: float
    cached_rerun_computed: int
    s2_toggle_wall_s: float
    s2_toggle_share: float
    s2_toggle_computed: int
    s2_toggle_reused: int
    calls_s: list[float]


def timed_run(config: RunConfig) -> tuple[RunManifest, float]:
    from mai.flows.run import mai_run

    started = time.perf_counter()
    manifest = mai_run(config)
    return manifest, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=240)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()

    from mai.config import DEMO_MAX_NEW_TOKENS, RunConfig
    from mai.run.assets import build_demo_dataset, build_models
    from mai.storage.paths import Home

    home = Home.at(args.home or tempfile.mkdtemp(prefix="mai-bench-"))
    build_models(home)
    build_demo_dataset(home, n=args.rows, force=True)
    base = {"home": str(home.root), "shards": args.shards, "max_new_tokens": DEMO_MAX_NEW_TOKENS}
    first, first_s = timed_run(RunConfig(**base))
    cached, cached_s = timed_run(RunConfig(**base))
    toggled, toggled_s = timed_run(RunConfig(**base, s2=True))
    t = first["timings"]
    report = OrchestrationCost(
        samples=first["counts"]["valid"], shards=args.shards, cpu=platform.processor() or platform.machine(),
        cores=os.cpu_count(), routes=first["routes"],
        first_run_wall_s=round(t["wall_s"], 2), first_run_call_s=round(first_s, 2),
        engine_generate_s=round(t["engine_generate_s"], 2), model_load_s=round(t["model_load_s"], 2),
        overhead=round(t["wall_s"] / t["engine_generate_s"], 3),
        overhead_excluding_model_load=round((t["wall_s"] - t["model_load_s"]) / t["engine_generate_s"], 3),
        cached_rerun_wall_s=round(cached["timings"]["wall_s"], 2),
        cached_rerun_share=round(cached["timings"]["wall_s"] / t["wall_s"], 4),
        cached_rerun_computed=cached["counts"]["generations_computed"],
        s2_toggle_wall_s=round(toggled["timings"]["wall_s"], 2),
        s2_toggle_share=round(toggled["timings"]["wall_s"] / t["wall_s"], 4),
        s2_toggle_computed=toggled["counts"]["generations_computed"],
        s2_toggle_reused=toggled["counts"]["generations_reused"],
        calls_s=[round(first_s, 2), round(cached_s, 2), round(toggled_s, 2)],
    )
    print(json.dumps(asdict(report), indent=2))


if __name__ == "__main__":
    main()
