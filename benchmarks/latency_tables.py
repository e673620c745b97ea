"""Paper-style latency tables for the tiny pair on this machine (results in docs/benchmarks.md).

1. Profiles (tables 1-4): `mai-profile` of mai-tiny-small and mai-tiny-large over image resolutions, query
   lengths and forced output lengths (preprocessing, vision encoder, TTFT, decode, tokens/s).
2. Table 11/12-style rows on the demo: MAI, Full RT, large-model R and small-model R runs on the same
   samples, estimated under the measured CPU profiles and under the paper's H100 numbers (tiny-small as
   Qwen3-VL-2B, tiny-large as Qwen3-VL-8B), and measured (stored per-call wall time, batch-amortised).

Run: `.venv/bin/python benchmarks/latency_tables.py [--limit 120]`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Literal

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

CSV = Path(__file__).resolve().parents[1] / "docs" / "paper_latency_h100.csv"
# the columns of a profile point the tables show
ProfileColumn = Literal["image_resolution", "image_tokens", "query_tokens", "input_tokens", "output_tokens",
                        "preprocess_ms", "vision_ms", "ttft_ms", "decode_ms", "tokens_per_s"]
SHOWN: tuple[ProfileColumn, ...] = ("image_resolution", "image_tokens", "query_tokens", "input_tokens",
                                    "output_tokens", "preprocess_ms", "vision_ms", "ttft_ms", "decode_ms",
                                    "tokens_per_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from mai.config import DEMO_MAX_NEW_TOKENS, RunConfig
    from mai.dashboards.saved import load_saved
    from mai.flows.profiles import mai_profile
    from mai.flows.run import mai_run
    from mai.run.assets import build_demo_dataset, build_models
    from mai.run.estimate import estimate_run
    from mai.storage.catalog import query
    from mai.storage.latency import rows_from_csv, write_profile
    from mai.storage.paths import Home

    home = Home.at(tempfile.mkdtemp(prefix="mai-latency-bench-"))
    build_models(home)
    build_demo_dataset(home)
    profiles = {model: mai_profile(model, f"{model}-cpu", resolutions=[256, 512], query_tokens=[64, 256, 512],
                                   output_tokens=[8, 128, 256], repeats=args.repeats, home=str(home.root))
                for model in ("mai-tiny-small", "mai-tiny-large")}
    for paper_model, name in (("Qwen3-VL-2B", "h100-2b"), ("Qwen3-VL-8B", "h100-8b")):
        write_profile(home, name, [r for r in rows_from_csv(CSV, "H100") if r["model"] == paper_model])
    base = {"home": str(home.root), "limit": args.limit, "max_new_tokens": {**DEMO_MAX_NEW_TOKENS, "R": 128}}
    runs = {"MAI": RunConfig(**base), "Full RT": RunConfig(**base, mode="full_rt"),
            "large R": RunConfig(**base, mode="single", single_model="large", single_prompt="R"),
            "small R": RunConfig(**base, mode="single", single_model="small", single_prompt="R")}
    for config in runs.values():
        run_id = mai_run(config)["run_id"]
        estimate_run(run_id, {"mai-tiny-small": "mai-tiny-small-cpu", "mai-tiny-large": "mai-tiny-large-cpu"},
                     "tiny-cpu", str(home.root))
        estimate_run(run_id, {"mai-tiny-small": "h100-2b", "mai-tiny-large": "h100-8b"}, "paper-h100", str(home.root))
    columns, rows = query(home, load_saved("speedup"))
    table = [{c: (round(v, 4) if isinstance(v, float) else v) for c, v in zip(columns, row) if c != "run_id"}
             for row in rows]
    print(json.dumps({"profiles": {m: [{k: r[k] for k in SHOWN} for r in rs] for m, rs in profiles.items()},
                      "speedup": table}, indent=1, default=str))


if __name__ == "__main__":
    main()
