"""The standing GPU checklist as one script: what a lent GPU machine (no network, 15 minutes) must show, in order of
value, each step's results written under `--out` as soon as the step ends, the whole stopped by `--budget-s`.

1. `cascade`: the MAI cascade end to end on CUDA (transformers backend, bfloat16) with the real-size random-weight
   architectures (`random:qwen3-vl-2b` + `random:qwen3-vl-8b`) over `--samples` shapes samples, output lengths
   fixed to the paper's table 5 means for ChartQA (S 4, 2B R 256, RT 4 tokens: `--min-new-tokens` =
   `--max-new-tokens`), so that timings mean something although random weights answer nothing; then the same
   command again, which must compute nothing.
2. `baseline`: the 8B alone with R (294 tokens, table 5) on the same samples; `cascade.csv` then holds the measured
   MAI / 8B-R wall-time ratio. With random weights no answer parses, so every sample disagrees and takes the full
   path (MV1 -> R -> MV2 -> RT): the measured ratio is MAI's worst case. `ratio.csv` also recombines the measured
   per-stage costs with the routing the paper measured on ChartQA (table 10: 72.0 % MV1, 7.8 % MV2, 20.2 % RT).
3. `profile-8b`, `profile-2b`: `mai profile` over a reduced version of the paper's grid (tables 1-4: resolutions
   448 and 1024, query 64 and 512, outputs 8 and 128) into `profile.csv`.
4. `roofline`: decode tokens/s of the 8B at batch 1 and 32 against the memory-bandwidth limit (weight bytes /
   measured copy bandwidth) and the compute limit (measured bf16 matmul rate / 2 FLOPs per parameter per token).
5. `internvl`: the same cascade with `random:internvl3.5-2b` + `random:internvl3.5-8b` on fewer samples.

Run (the device's Python, wheels unpacked on PYTHONPATH): `python benchmarks/gpu_checklist.py --out $OUT
--budget-s 470`. On a CPU, `--small mai-tiny-small --large mai-tiny-large --dtype float32 --samples 8 --quick`
checks the script itself (its InternVL step on the built-in tiny InternVL pair). Results: docs/benchmarks.md
("GPU").
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mai.config import INTERNVL_LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN

if TYPE_CHECKING:
    from mai.manifest import RunManifest

# table 5 (Qwen3-VL, ChartQA column): mean generated tokens, rounded
FIXED_LENGTHS = {"S": 4, "R": 256, "RT": 4}
LARGE_R_TOKENS = 294
# table 10, ChartQA: the share of samples each route decided
PAPER_ROUTING = {"MV1": 0.720, "MV2": 0.078, "RT": 0.202}
PROFILE_GRID = ["--resolutions", "448,1024", "--query-tokens", "64,512", "--output-tokens", "8,128"]


class Checklist:
    """Runs steps in order until the budget is spent; each step's outcome goes to status.csv at once."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.out, self.deadline = out, time.monotonic() + budget_s
        self.home = Path(os.environ.get("MAI_HOME", "/tmp/mai-gpu-home"))
        self.log = (out / "log.txt").open("a")
        self.manifests: dict[str, RunManifest] = {}
        self.command_s: dict[str, float] = {}  # each run command, Prefect's start and model loads included
        self.cap_s = budget_s  # the running step's own limit (a hung step must not eat the whole budget)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def step(self, name: str, needs_s: float, action: Callable[[], object], cap_s: float = 150) -> None:
        started, self.cap_s = time.monotonic(), cap_s
        if self.left_s() < needs_s:
            self._status(name, "skipped", 0.0, f"{self.left_s():.0f} s left, needs about {needs_s:.0f} s")
            return
        try:
            action()
            self._status(name, "ok", time.monotonic() - started, "")
        except Exception as error:  # noqa: BLE001  # a failed step is recorded and the list goes on: steps are independent
            self._status(name, "failed", time.monotonic() - started, f"{type(error).__name__}: {error}"[:500])

    def mai(self, *args: str) -> str:
        """One `mai` command in a fresh process (as users run it); its output goes to the log."""
        command = [sys.executable, "-m", "mai.cli", "--home", str(self.home), *args]
        self.log.write(f"\n$ mai {' '.join(args)}\n")
        self.log.flush()
        limit = max(10.0, min(self.cap_s, self.left_s()))
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=limit)
        self.log.write(done.stdout[-20000:] + done.stderr[-20000:])
        self.log.flush()
        if done.returncode != 0:
            raise RuntimeError(f"mai {args[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}")
        return done.stdout

    def run(self, label: str, *args: str) -> RunManifest:
        started = time.monotonic()
        manifest: RunManifest = json.loads(self.mai("run", "--json", "--name", label, *args))
        self.command_s[label] = round(time.monotonic() - started, 3)
        self.manifests[label] = manifest
        # at most 8 files come back from a lent machine: the runs' table is made from this file afterwards
        (self.out / "manifests.json").write_text(json.dumps({"manifests": self.manifests, "command_s": self.command_s},
                                                             indent=1))
        return manifest

    def _status(self, name: str, outcome: str, seconds: float, detail: str) -> None:
        path = self.out / "status.csv"
        new = not path.exists()
        with path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(["step", "outcome", "seconds", "detail"])
            writer.writerow([name, outcome, round(seconds, 1), detail])
        print(f"[{outcome}] {name} {seconds:.1f} s {detail}", flush=True)


def _write_csv(path: Path, rows: Sequence[dict[str, object]]) -> None:
    if not rows:
        return
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


def _run_row(label: str, manifest: RunManifest, command_s: float | None) -> dict[str, object]:
    counts, timings = manifest["counts"], manifest["timings"]
    metrics = {f"{m['metric']}:{m['subset']}": m["value"] for m in manifest["metrics"]}
    return {"run": label, "run_id": manifest["run_id"], **{f"route_{k}": v for k, v in manifest["routes"].items()},
            "samples": counts["samples"], "computed": counts["generations_computed"],
            "reused": counts["generations_reused"], "wall_s": timings["wall_s"],
            "engine_generate_s": timings["engine_generate_s"], "model_load_s": timings["model_load_s"],
            "command_s": command_s, **metrics}


def fixed_lengths(lengths: dict[str, int]) -> list[str]:
    flags = []
    for kind, tokens in lengths.items():
        flags += ["--max-new-tokens", f"{kind}={tokens}", "--min-new-tokens", f"{kind}={tokens}"]
    return flags


def environment(out: Path) -> None:
    """The GPU, the libraries, and the two ceilings the roofline is drawn against, measured here."""
    import torch
    import transformers

    row: dict[str, object] = {"python": sys.version.split()[0], "torch": torch.__version__,
                           "transformers": transformers.__version__, "cuda": torch.version.cuda,
                           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    for name in ("prefect", "duckdb", "pyarrow"):
        row[name] = __import__(name).__version__
    if torch.cuda.is_available():
        row["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        row["copy_gb_s"], row["bf16_tflop_s"] = _measured_ceilings(torch)
    _write_csv(out / "env.csv", [row])


def _measured_ceilings(torch: Any) -> tuple[float, float]:
    source = torch.empty(2**30, dtype=torch.uint8, device="cuda")  # 1 GiB
    target = torch.empty_like(source)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        target.copy_(source)
        a @ a
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(10):
        target.copy_(source)
    torch.cuda.synchronize()
    copy_gb_s = 2 * 10 * source.numel() / (time.perf_counter() - started) / 1e9  # bytes read + written
    started = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    tflop_s = 10 * 2 * 8192**3 / (time.perf_counter() - started) / 1e12
    del source, target, a
    torch.cuda.empty_cache()
    return round(copy_gb_s, 1), round(tflop_s, 1)


def roofline(out: Path, model: str, dtype: str, batches: Sequence[int], tokens: int) -> None:
    """Decode tokens/s of `model` at each batch size (prompt of 64 text tokens, exactly `tokens` new tokens; decode =
    full generate - one-token generate), beside the bandwidth and compute limits."""
    import torch

    from mai.backends.architectures import build_random_architecture

    network, _, tokenizer = build_random_architecture(model, getattr(torch, dtype), "cuda", out.parent / "rf")
    parameters = sum(p.numel() for p in network.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in network.parameters())
    env = next(csv.DictReader((out / "env.csv").open()))
    # a copy moves its bytes twice (read + write) through the same HBM: its total is the traffic a decode step has
    copy_bytes_s, flop_s = float(env["copy_gb_s"]) * 1e9, float(env["bf16_tflop_s"]) * 1e12
    rows = []
    for batch in batches:
        ids = torch.randint(1000, 20000, (batch, 64), device="cuda")
        timed = {n: _generate_s(network, ids, n) for n in (1, tokens)}
        decode_s = timed[tokens] - timed[1]
        rows.append({"model": model, "dtype": dtype, "batch": batch, "new_tokens": tokens,
                     "parameters": parameters, "weight_gb": round(weight_bytes / 1e9, 2),
                     "decode_tokens_s": round(batch * (tokens - 1) / decode_s, 1),
                     "bandwidth_limit_tokens_s": round(batch * copy_bytes_s / weight_bytes, 1),
                     "compute_limit_tokens_s": round(flop_s / (2 * parameters), 1),
                     "step_ms": round(1000 * decode_s / (tokens - 1), 2)})
        _write_csv(out / "roofline.csv", rows)
    del network, tokenizer


def _generate_s(network: Any, ids: Any, tokens: int) -> float:
    import torch

    kwargs = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False}
    with torch.inference_mode():
        network.generate(input_ids=ids, **kwargs)  # warm-up (kernels, allocator)
        torch.cuda.synchronize()
        started = time.perf_counter()
        network.generate(input_ids=ids, **kwargs)
        torch.cuda.synchronize()
    return time.perf_counter() - started


def ratios(out: Path, checklist: Checklist, mai_label: str, base_label: str) -> None:
    """MAI against the large model's R on the same samples: measured (every sample on the full path, random weights)
    and recombined with the paper's ChartQA routing from the measured per-sample cost of each stage."""
    stages = json.loads(checklist.mai("sql", "--saved", "stage_costs", "--format", "json"))
    _write_csv(out / "stages.csv", stages)
    mai, base = checklist.manifests[mai_label], checklist.manifests[base_label]
    per_sample = {s["stage"]: s["amortised_wall_s"] / s["calls"] for s in stages if s["run_id"] == mai["run_id"]}
    base_per_sample = sum(s["amortised_wall_s"] / s["calls"] for s in stages if s["run_id"] == base["run_id"])
    reach_r = PAPER_ROUTING["MV2"] + PAPER_ROUTING["RT"]
    projected = (per_sample.get("s_large", 0) + per_sample.get("s_small", 0) + reach_r * per_sample.get("r_small", 0)
                 + PAPER_ROUTING["RT"] * per_sample.get("rt_large", 0))
    rows = [{"measure": "flow wall (manifest)", "mai_s": mai["timings"]["wall_s"], "large_r_s": base["timings"]["wall_s"]},
            {"measure": "engine generate (manifest)", "mai_s": mai["timings"]["engine_generate_s"],
             "large_r_s": base["timings"]["engine_generate_s"]},
            {"measure": "generation wall per sample, all samples on the full path",
             "mai_s": sum(per_sample.values()), "large_r_s": base_per_sample},
            {"measure": "generation wall per sample, paper ChartQA routing (table 10)", "mai_s": projected,
             "large_r_s": base_per_sample}]
    for row in rows:
        row["mai_over_large_r"] = round(row["mai_s"] / row["large_r_s"], 3) if row["large_r_s"] else None
        row["speedup"] = round(row["large_r_s"] / row["mai_s"], 2) if row["mai_s"] else None
    _write_csv(out / "ratio.csv", rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tabulate", action="store_true",
                        help="only write OUT/runs.csv from the OUT/manifests.json a checklist left")
    parser.add_argument("--budget-s", type=float, default=470)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--internvl-samples", type=int, default=64)
    parser.add_argument("--small", default="random:qwen3-vl-2b")
    parser.add_argument("--large", default="random:qwen3-vl-8b")
    parser.add_argument("--internvl-small", help="default: random:internvl3.5-2b (--quick: the built-in tiny one)")
    parser.add_argument("--internvl-large", help="default: random:internvl3.5-8b (--quick: the built-in tiny one)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="tiny lengths and grid: checks the script on a CPU")
    args = parser.parse_args()
    if args.tabulate:
        saved = json.loads((args.out / "manifests.json").read_text())
        manifests, command_s = saved.get("manifests", saved), saved.get("command_s", {})
        _write_csv(args.out / "runs.csv", [_run_row(name, m, command_s.get(name, m.get("command_s")))
                                              for name, m in manifests.items()])
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    checklist = Checklist(args.out, args.budget_s)
    lengths, large_r, grid = FIXED_LENGTHS, LARGE_R_TOKENS, PROFILE_GRID
    internvl_pair = ("random:internvl3.5-2b", "random:internvl3.5-8b")
    if args.quick:
        lengths, large_r = {"S": 2, "R": 8, "RT": 2}, 9
        grid = ["--resolutions", "256", "--query-tokens", "16", "--output-tokens", "4"]
        # the real-size InternVL pair does not fit a CPU check (the 8B in float32 is 32 GB): the tiny pair checks
        # the step, as the tiny Qwen pair checks the others
        internvl_pair = (INTERNVL_SMALL_BUILTIN, INTERNVL_LARGE_BUILTIN)
    common = ["--benchmark", "shapes", "--limit", str(args.samples), "--dtype", args.dtype, "--shards", "1",
              "--batch-size", str(args.batch_size)]
    pair = ["--small-model", args.small, "--large-model", args.large]

    checklist.step("environment", 5, lambda: environment(args.out))
    checklist.step("build-shapes", 5, lambda: print(checklist.mai("build-shapes")))
    checklist.step("cascade", 60, lambda: checklist.run("mai", *common, *pair, *fixed_lengths(lengths)), cap_s=200)
    checklist.step("cascade-again", 15, lambda: _computes_nothing(checklist.run("mai-again", *common, *pair,
                                                                                *fixed_lengths(lengths))))
    checklist.step("baseline", 45, lambda: checklist.run("large-r", *common, *pair, "--mode", "single",
                                                         "--single-model", "large", "--single-prompt", "R",
                                                         *fixed_lengths({"R": large_r})), cap_s=150)
    checklist.step("ratio", 10, lambda: ratios(args.out, checklist, "mai", "large-r"))
    for label, model in (("8b", args.large), ("2b", args.small)):
        checklist.step(f"profile-{label}", 60, lambda model=model, label=label: checklist.mai(
            "profile", model, "--name", f"gpu-{label}", "--dtype", args.dtype, "--repeats", "3", *grid), cap_s=120)
        checklist.step(f"profile-{label}-csv", 5, lambda: _write_csv(args.out / "profile.csv", json.loads(
            checklist.mai("sql", "--format", "json", "SELECT * FROM latency_profiles ORDER BY ALL"))))
        if label == "8b" and args.large.startswith("random:") and not args.quick:
            checklist.step("roofline", 30, lambda: roofline(args.out, args.large, args.dtype, (1, 32), 128))
    internvl = ["--small-model", args.internvl_small or internvl_pair[0],
                "--large-model", args.internvl_large or internvl_pair[1], "--limit", str(args.internvl_samples)]
    checklist.step("internvl", 60, lambda: checklist.run("internvl-mai", *common, *internvl,
                                                         *fixed_lengths(lengths)), cap_s=150)
    return 0


def _computes_nothing(manifest: RunManifest) -> None:
    if manifest["counts"]["generations_computed"] != 0:
        raise AssertionError(f"the same run again computed {manifest['counts']['generations_computed']} generations")


if __name__ == "__main__":
    sys.exit(main())
