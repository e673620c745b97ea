"""Build time and file size of `mai report` (goal: < 5 s and < 10 MB).

Two stores:
- `shapes`: the shipped shapes pair on the full shapes test split (480 items), 10 runs through the real pipeline:
  MAI, MAI +S2, small S, small E, small R, small R +S2, large S, Full RT and a 2-layer sparse-RT sweep, with the
  paper's H100 profiles imported and every run estimated. Building the runs takes a while on a CPU (small R reads
  ~100 tokens per item); they are cached by identity, so a second call only rebuilds the report.
- `synthetic`: a store of N generations (default 100,000) written straight into the store's Parquet schemas
  (samples, generations, routes, scores, metrics, runs; no model): 10 runs over N / 10 shapes-like items, each
  run's generations its own except the MV1 answers, which the cascade and the single-model S runs share, as real
  runs do. Texts have the length of real ones (R ~ 400 characters).

Per store: the report over its 10 runs, built `--repeats` times (median and min of the wall time, measured inside
`build_report`: reading the views, the figures, the trace browser, writing the file), its size, and how many
samples the trace browser holds. Results print as JSON and as the markdown table of docs/benchmarks.md.

Run: `.venv/bin/python benchmarks/report_build.py [--shapes-home DIR] [--synthetic-home DIR] [--generations N]
[--repeats 3] [--only shapes|synthetic]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack, cast

if TYPE_CHECKING:
    from mai.manifest import RunManifest
    from mai.storage.paths import Home
    from mai.types import PromptKind, Role, RunMode, Sample

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

REPO = Path(__file__).resolve().parents[1]
STAGES = ("s_large", "s_small", "r_small", "s2_small", "rt_large", "single", "single_s2")


# --- the shapes test split, 10 real runs ------------------------------------------------------------------------


class RunVariant(TypedDict, total=False):
    """What a run of the shapes store changes in the shipped pair's configuration (the MAI cascade)."""

    mode: RunMode
    s2: bool
    single_model: Role
    single_prompt: PromptKind


def shapes_store(root: Path) -> list[str]:
    from mai import api
    from mai.config import shapes_pair_config

    def run(**overrides: Unpack[RunVariant]) -> str:
        started = time.perf_counter()
        manifest = api.run(shapes_pair_config(home=str(root), **overrides), progress=False)
        print(f"  run {manifest['run_id']} {overrides or 'cascade'}: {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)
        return str(manifest["run_id"])

    runs = [run(), run(s2=True),
            run(mode="single", single_model="small", single_prompt="S"),
            run(mode="single", single_model="small", single_prompt="E"),
            run(mode="single", single_model="small", single_prompt="R"),
            run(mode="single", single_model="small", single_prompt="R", s2=True),
            run(mode="single", single_model="large", single_prompt="S"),
            run(mode="full_rt")]
    runs += [str(m["run_id"]) for m in api.sweep(shapes_pair_config(home=str(root)), [1, 2])]
    csv = REPO / "docs" / "paper_latency_h100.csv"
    api.import_profile(csv, "h100-2b", model="Qwen3-VL-2B", home=root, replace=True)
    api.import_profile(csv, "h100-8b", model="Qwen3-VL-8B", home=root, replace=True)
    for run_id in runs:
        api.estimate(run_id, {"mai-shapes-small": "h100-2b", "mai-shapes-large": "h100-8b"}, name="h100", home=root)
    return runs


# --- a synthetic store of N generations ---------------------------------------------------------------------------

# (run label, mode, s2, single role, single prompt): the shapes of the real runs above
RUNS = [("MAI", "cascade", False, None, None), ("MAI +S2", "cascade", True, None, None),
        ("small S", "single", False, "small", "S"), ("large S", "single", False, "large", "S"),
        ("small R", "single", False, "small", "R"), ("small R +S2", "single", True, "small", "R"),
        ("large R", "single", False, "large", "R"), ("small E", "single", False, "small", "E"),
        ("large E", "single", False, "large", "E"), ("Full RT", "full_rt", False, None, None)]
MODELS = {"small": "mai-shapes-small", "large": "mai-shapes-large"}
CATEGORIES = ("presence", "counting", "attribute", "two_step")


def synthetic_store(root: Path, generations: int, seed: int = 0) -> list[str]:
    """Writes the store; returns its run ids. Each run writes its own generations except the shared MV1 S answers:
    per item, the 10 runs use ~10 distinct generations, so N generations make N / 10 items."""
    from mai.evals.loading import DataSource
    from mai.evals.shapes_world import draw, random_scene
    from mai.storage.catalog import build_catalog
    from mai.storage.partitions import write_part
    from mai.storage.paths import Home
    from mai.storage.samples import shard_directory, shard_path, store_image, write_shard
    from mai.types import Sample

    home = Home.at(root)
    rng = random.Random(seed)
    n_items = generations // 10
    picture = draw(random_scene(random.Random(seed)))  # one real shapes picture, stored once
    image_path, image_hash = store_image(home, picture)
    fingerprint = hashlib.sha256(f"synthetic-{n_items}-{seed}".encode()).hexdigest()
    samples = []
    for i in range(n_items):
        category = CATEGORIES[i % 4]
        options = ("red", "green", "blue", "yellow") if category == "attribute" else ()
        answer = {"presence": rng.choice(["yes", "no"]), "attribute": rng.choice("ABCD")}.get(category,
                                                                                             str(rng.randint(0, 6)))
        samples.append(Sample(sample_id=f"shapes-{i}", benchmark="shapes", question=f"Synthetic question {i}?",
                              options=options, answer=answer, image_paths=(image_path,), image_sha256=(image_hash,),
                              category=category, content_hash=hashlib.sha256(f"{fingerprint}{i}".encode()).hexdigest(),
                              answer_style="letter" if options else "phrase", references=(answer,)))
    directory = shard_directory(home, "shapes", "synthetic", fingerprint, 1, None)
    shard = shard_path(directory, 0)
    write_shard(shard, samples, DataSource("synthetic", "test", None, None, fingerprint))
    now = datetime.now(UTC)
    # generation rows by (model, prompt kind), in the generations table's columns. Not GenerationRow: like the
    # store's first runs, these have no output token ids and no min_new_tokens (NULL)
    written: dict[tuple[str, str], list[dict[str, object]]] = {}

    def generation(sample: Sample, role: str, kind: str, key: str, right: bool) -> tuple[str, str]:
        gen_id = hashlib.sha256(f"{key}/{sample.sample_id}/{role}/{kind}".encode()).hexdigest()
        answer = sample.answer if right else _wrong(sample.answer, rng)
        text = {"S": f"[[{answer}]]", "S2": answer, "RT": answer}.get(kind) or _reasoning(rng, kind, answer)
        out = max(1, len(text) // 4)
        written.setdefault((MODELS[role], kind), []).append({
            "gen_id": gen_id, "sample_id": sample.sample_id, "benchmark": "shapes", "model": MODELS[role],
            "model_revision": "main", "dtype": "float32", "prompt_kind": kind, "template": f"{kind}-v1",
            "upstream_gen_id": None, "max_new_tokens": 160, "min_new_tokens": None, "prompt_text": sample.question,
            "text": text, "output_token_ids": None, "answer_span": answer, "prompt_tokens": 60 + rng.randint(0, 40),
            "output_tokens": out, "finish_reason": "stop", "ttft_s": 0.01, "decode_s": out * 0.002,
            "wall_s": 0.01 + out * 0.002, "batch_size": 8, "backend": "transformers", "run_id": key,
            "created_at": now, "cached_prompt_tokens": None})
        return gen_id, answer

    run_ids = []
    for number, (label, mode, s2, role, prompt) in enumerate(RUNS):
        run_id = f"20260101-0000{number:02d}-{uuid.uuid4().hex[:6]}"
        routes = [_route_row(run_id, sample, mode, s2, role, prompt, generation, rng) for sample in samples]
        _finish_run(home, run_id, label, mode, s2, role, prompt, fingerprint, routes, shard)
        run_ids.append(run_id)
    for (model, kind), rows in written.items():
        unique = list({r["gen_id"]: r for r in rows}.values())
        for start in range(0, len(unique), 20_000):
            write_part(home, home.generations / model / kind, unique[start:start + 20_000], "generations")
    build_catalog(home)
    return run_ids


def _wrong(answer: str, rng: random.Random) -> str:
    if answer in ("yes", "no"):
        return "no" if answer == "yes" else "yes"
    if answer in "ABCD" and len(answer) == 1:
        return rng.choice([c for c in "ABCD" if c != answer])
    return str(int(answer) + 1)


# makes (or shares) one stage output of a sample: (sample, role, kind, generation key, right?) -> (gen_id, answer)
MakeGeneration = Callable[["Sample", str, str, str, bool], tuple[str, str]]


@dataclass
class SyntheticRoute:
    """One sample's way through a synthetic run: the outputs (gen_id, answer) of the stages it used, by stage."""

    sample: Sample
    outputs: dict[str, tuple[str, str]] = field(default_factory=dict)
    route: str = ""
    final_stage: str = ""
    final_answer: str = ""

    @property
    def final_gen_id(self) -> str:
        return self.outputs[self.final_stage][0]

    @property
    def score(self) -> float:
        return 1.0 if self.final_answer == self.sample.answer else 0.0

    def row(self, run_id: str) -> dict[str, object]:
        """The route as a row of the routes table (a stage the sample did not reach: NULL gen and answer)."""
        stages: dict[str, object] = {f"{p}_{s}": None for s in STAGES for p in ("answer", "gen")}
        for stage, (gen_id, answer) in self.outputs.items():
            stages[f"gen_{stage}"], stages[f"answer_{stage}"] = gen_id, answer
        return {**stages, "run_id": run_id, "sample_id": self.sample.sample_id, "shard": 0,
                "category": self.sample.category, "route": self.route, "final_answer": self.final_answer,
                "final_gen_id": self.final_gen_id, "reference": self.sample.answer, "score": self.score,
                "parsed": True, "agreement_rule": "exact_match_after_parsing (numbers: relaxed match)", "error": None}


def _reasoning(rng: random.Random, kind: str, answer: str) -> str:
    rows = [", ".join(rng.choice(["empty", "red circle", "blue square", "green triangle", "yellow circle"])
                      for _ in range(4)) for _ in range(4)]
    walk = "\n".join(f"Row {i + 1}: {row}." for i, row in enumerate(rows))
    return (f"Let me look at each row of the grid.\n{walk}\nSo the answer is {answer}. [[{answer}]]" if kind == "R"
            else f"The picture shows {rows[0]}. [[{answer}]]")


def _route_row(run_id: str, sample: Sample, mode: str, s2: bool, role: str | None, prompt: str | None,
               generation: MakeGeneration, rng: random.Random) -> SyntheticRoute:
    """One route, drawing per sample whether each output is right (large S 83 %, small S 71 %, R 77 %, ...),
    sharing the MV1 S answers across runs (their generation key is the model's, not the run's)."""
    routed = SyntheticRoute(sample)
    odds = {"S": 0.75, "E": 0.75, "R": 0.77, "S2": 0.78, "RT": 0.85}

    def use(stage: str, use_role: str, kind: str, shared: bool) -> str:
        seeded = random.Random(f"{sample.sample_id}/{use_role}/{kind}")  # the same answer for a shared output
        right = seeded.random() < (odds[kind] + (0.08 if use_role == "large" and kind == "S" else 0.0))
        gen_id, answer = generation(sample, use_role, kind, "shared" if shared else run_id, right)
        routed.outputs[stage] = (gen_id, answer)
        return answer

    if mode == "single":
        assert role and prompt
        final = use("single", role, prompt, prompt == "S")
        final_stage, route = "single", "SINGLE"
        if s2:
            final, final_stage = use("single_s2", role, "S2", False), "single_s2"
    elif mode == "full_rt":
        use("r_small", "small", "R", False)
        final, final_stage, route = use("rt_large", "large", "RT", False), "rt_large", "RT"
    else:
        large, small = use("s_large", "large", "S", True), use("s_small", "small", "S", True)
        final, final_stage, route = large, "s_large", "MV1"
        if large != small:
            reasoned = use("r_small", "small", "R", False)
            if s2:
                reasoned = use("s2_small", "small", "S2", False)
            route = "MV2"
            if reasoned != large:
                final, final_stage, route = use("rt_large", "large", "RT", False), "rt_large", "RT"
    routed.route, routed.final_stage, routed.final_answer = route, final_stage, final
    return routed


def _finish_run(home: Home, run_id: str, label: str, mode: str, s2: bool, role: str | None, prompt: str | None,
                fingerprint: str, routes: list[SyntheticRoute], shard: Path) -> None:
    from mai.config import SHAPES_MAX_NEW_TOKENS
    from mai.storage.runs import write_manifest, write_metrics, write_routes, write_scores

    write_routes(home, run_id, [r.row(run_id) for r in routes])
    write_scores(home, run_id, "exact-match", [
        {"run_id": run_id, "sample_id": r.sample.sample_id, "scorer_profile": "exact-match",
         "parsed": r.final_answer, "score": r.score, "final_gen_id": r.final_gen_id} for r in routes])
    accuracy = sum(r.score for r in routes) / len(routes)
    write_metrics(home, run_id, "exact-match", [
        {"run_id": run_id, "benchmark": "shapes", "metric": "accuracy", "subset": "overall", "value": accuracy,
         "n": len(routes), "unit": "fraction", "scorer_profile": "exact-match"}])
    counts = {label: sum(r.route == label for r in routes) for label in ("MV1", "MV2", "RT")}
    config = {"benchmark": "shapes", "small_model": MODELS["small"], "large_model": MODELS["large"],
              "small_revision": "main", "large_revision": "main", "dtype": "float32", "mode": mode, "s2": s2,
              "single_model": role or "large", "single_prompt": prompt or "S", "transfer": "full",
              "max_new_tokens": dict(SHAPES_MAX_NEW_TOKENS), "limit": None}
    now = datetime.now(UTC)
    row = {"run_id": run_id, "run_name": f"synthetic {label}", "config_key": run_id, "started_at": now,
           "finished_at": now, "wall_s": 1.0, "engine_generate_s": 1.0, "model_load_s": 0.0, "mode": mode,
           "benchmark": "shapes", "dataset_fingerprint": fingerprint,
           "small_model": MODELS["small"] if mode != "single" or role == "small" else None,
           "large_model": MODELS["large"] if mode != "single" or role == "large" else None,
           "single_model": role, "single_prompt": prompt, "s2": s2, "transfer": "full", "transfer_layer": None,
           "transfer_delta": 0.8, "backend": "transformers", "n_shards": 1, "n_samples": len(routes),
           "n_valid": len(routes), "n_errors": 0, "n_generations_needed": 0, "n_generations_computed": 0,
           "n_generations_reused": 0, "routed_mv1": counts["MV1"], "routed_mv2": counts["MV2"],
           "routed_rt": counts["RT"], "git_commit": None, "config_json": json.dumps(config), "versions_json": "{}"}
    # a synthetic run's manifest holds only what the report reads of it (its configuration and its shard)
    manifest = cast("RunManifest", {"run_id": run_id, "config": config, "shard_paths": [str(shard)]})
    write_manifest(home, run_id, manifest, row)


# --- measuring ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportBuild:
    """The report over a store's runs, built `repeats` times: wall and CPU time, size, trace browser samples."""

    store: str
    runs: int
    generations: int
    samples: int
    load_average: float
    build_s_median: float
    build_s_min: float
    cpu_s_median: float
    repeats: int
    bytes: int
    megabytes: float
    trace_samples: int


def measure(root: Path, repeats: int, out: Path, run_ids: list[str] | None = None) -> ReportBuild:
    from mai.dashboards.report import build_report
    from mai.storage.catalog import query
    from mai.storage.paths import Home

    home = Home.at(root)
    seconds, cpu, built = [], [], None
    for _ in range(repeats):
        started = time.process_time()
        built = build_report(home, run_ids, out)
        seconds.append(built["seconds"])
        cpu.append(time.process_time() - started)  # this process's CPU time: less sensitive to a busy machine
    assert built is not None
    generations = _count(query(home, "SELECT count(*) FROM generations")[1])
    samples = _count(query(home, "SELECT count(DISTINCT sample_id) FROM routes")[1])
    return ReportBuild(store=str(root), runs=built["runs"], generations=generations, samples=samples,
                       load_average=os.getloadavg()[0],
                       build_s_median=statistics.median(seconds), build_s_min=min(seconds),
                       cpu_s_median=statistics.median(cpu), repeats=repeats,
                       bytes=built["bytes"], megabytes=round(built["bytes"] / 1e6, 2), trace_samples=built["trace_samples"])


def _count(rows: list[tuple[object, ...]]) -> int:
    """The one value of a `SELECT count(...)`."""
    (value,), = rows
    if not isinstance(value, int):
        raise TypeError(f"expected a count, got {value!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes-home", type=Path, default=REPO / "build" / "report-bench-shapes")
    parser.add_argument("--synthetic-home", type=Path, default=REPO / "build" / "report-bench-synthetic")
    parser.add_argument("--generations", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("shapes", "synthetic"))
    args = parser.parse_args()
    results: dict[str, ReportBuild] = {}
    if args.only != "synthetic":
        started = time.perf_counter()
        run_ids = shapes_store(args.shapes_home)
        print(f"shapes store ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        results["shapes"] = measure(args.shapes_home, args.repeats, args.shapes_home / "report.html", run_ids)
    if args.only != "shapes":
        if not (args.synthetic_home / "store" / "runs").exists():
            started = time.perf_counter()
            synthetic_store(args.synthetic_home, args.generations)
            print(f"synthetic store written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        results["synthetic"] = measure(args.synthetic_home, args.repeats, args.synthetic_home / "report.html")
    print(json.dumps({name: asdict(r) for name, r in results.items()}, indent=2))
    print("| store | runs | generations in the store | samples | build s (median / min) | CPU s (median) | size MB "
          "| trace browser holds | load average |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r.runs} | {r.generations} | {r.samples} | {r.build_s_median:.2f} / "
              f"{r.build_s_min:.2f} | {r.cpu_s_median:.2f} | {r.megabytes:.2f} | {r.trace_samples} | "
              f"{r.load_average:.1f} |")


if __name__ == "__main__":
    main()
