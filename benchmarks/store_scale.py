"""The store at paper scale: N synthetic generations (default 10k, 100k, 1M) in the real schema, written through
the real write path (`GenerationStore.write`, one file per batch, the end-of-run compaction as runs do it), with
a realistic mix (S answers of a few tokens, R traces of ~200 tokens, S2/RT answers), plus the runs that used
them (routes, metrics, manifests' catalog rows); then a full `mai store compact`, and timings of:

- `SELECT count(*) FROM generations`, one sample's traces, the saved queries `routing_counts` and `s2_vs_non_s2`;
- the lookups a new run does before generating (`GenerationStore.known_among`: which of a shard's identities of
  every stage its partitions hold, with a fresh store object, nothing cached; and reading the R texts an RT
  stage needs for one shard of 256 samples);
- the accounting a finished run does (`count_computed_by_run` over its partitions);
- files, bytes on disk.

Run: `.venv/bin/python benchmarks/store_scale.py [--sizes 10000,100000,1000000] [--batch 8]`; one fresh store
per size under a temporary directory (removed at the end). Prints one JSON object per size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from mai.dashboards.saved import load_saved
from mai.identity import BackendIdentity
from mai.storage.catalog import build_catalog, query
from mai.storage.generations import GenerationStore, count_computed_by_run
from mai.storage.maintenance import auto_compact, compact_store, store_stats
from mai.storage.paths import Home
from mai.storage.runs import write_manifest, write_metrics, write_routes
from mai.types import ChatPrompt, Decoding, GenRequest, GenResult, ModelSpec, PromptKind

if TYPE_CHECKING:
    from mai.manifest import RunManifest

BACKEND = BackendIdentity(backend="transformers", engine="transformers 5.23.0", transformers="5.23.0", torch="2.13.0",
                          image_processor="pil", attention="sdpa")
MODELS = (ModelSpec("bench-small", "r1"), ModelSpec("bench-large", "r1"))
# share of generations per (model index, prompt kind): every sample has S from both, about half reach R, ...
MIX: tuple[tuple[int, PromptKind, float], ...] = ((1, "S", 0.3), (0, "S", 0.3), (0, "R", 0.2), (0, "S2", 0.1),
                                                    (1, "RT", 0.1))
# R traces of ~200 words drawn from a 2,000-word vocabulary (seeded): compressible like real text, not like a
# repeated string
VOCABULARY = [f"w{i}" for i in range(2_000)]
SAMPLES_PER_RUN = 5_000
BATCHES_PER_RUN = 256  # the end of a "run" compacts its partitions, as mai-run does


def gen_id(kind: str, model_index: int, index: int) -> str:
    """Identities are sha256 hex, as real ones are: a shard's ids are spread over the whole id space, so a
    lookup cannot skip row groups by their min/max statistics (sequential ids would flatter it)."""
    return hashlib.sha256(f"{kind}-{model_index}-{index}".encode()).hexdigest()


def generations(n: int, batch: int) -> list[tuple[ModelSpec, PromptKind, list[str], str]]:
    """(model, kind, gen_ids, run_id) per batch, in the order runs would write them."""
    plan = []
    counter = 0
    for model_index, kind, share in MIX:
        count = int(n * share)
        for start in range(0, count, batch):
            ids = [gen_id(kind, model_index, i) for i in range(start, min(count, start + batch))]
            plan.append((MODELS[model_index], kind, ids, f"run-{counter // BATCHES_PER_RUN:05d}"))
            counter += 1
    return plan


def write_generations(home: Home, n: int, batch: int) -> float:
    store = GenerationStore(home)
    rng = random.Random(2604)
    started = time.perf_counter()
    directories: set[Path] = set()
    for index, (model, kind, ids, run_id) in enumerate(generations(n, batch)):
        text = " ".join(rng.choices(VOCABULARY, k=200)) + " [[yes]]" if kind == "R" else "[[yes]]"
        requests = {g: GenRequest(g, f"sample-{int(g[:8], 16) % 20_000}", _prompt(), Decoding(64), f"{kind}-v1")
                    for g in ids}
        results = [GenResult(g, text, 300, len(text) // 5, "stop", 0.05, 0.2, 0.25, batch, (1, 2, 3)) for g in ids]
        store.write(model, kind, requests, results, {"benchmark": "bench", "backend": BACKEND, "run_id": run_id,
                                                     "host": "bench", "hardware": "bench"})
        directories.add(store.directory(model, kind))
        if (index + 1) % BATCHES_PER_RUN == 0:
            auto_compact(home, directories)
    return time.perf_counter() - started


def _prompt() -> ChatPrompt:
    return ChatPrompt("What is in the image?", ())


def write_runs(home: Home, n: int) -> int:
    """Runs in pairs without / with S2, each over SAMPLES_PER_RUN samples (routes, metrics, catalog row)."""
    runs = max(2, n // (4 * SAMPLES_PER_RUN)) // 2 * 2
    now = datetime.now(UTC)
    for r in range(runs):
        run_id, s2 = f"run-{r:05d}", bool(r % 2)
        routes = [{"run_id": run_id, "sample_id": f"sample-{i}", "shard": i % 8, "category": f"c{i % 5}",
                   "route": ("MV1", "MV2", "RT")[(i + r) % 3], "final_answer": "yes" if (i + s2) % 4 else "no",
                   "final_gen_id": gen_id("S", 1, i), "reference": "yes", "score": float((i + r) % 4 != 0),
                   "parsed": True, "agreement_rule": "exact", "error": None} for i in range(SAMPLES_PER_RUN)]
        write_routes(home, run_id, routes)
        write_metrics(home, run_id, "lmms-eval", [{"run_id": run_id, "benchmark": "bench", "metric": "accuracy",
                                                    "subset": "overall", "value": 0.75, "n": SAMPLES_PER_RUN,
                                                    "unit": "fraction", "scorer_profile": "lmms-eval"}])
        row = {"run_id": run_id, "run_name": run_id, "config_key": f"k{r // 2}", "started_at": now, "finished_at": now,
               "wall_s": 1.0, "engine_generate_s": 1.0, "model_load_s": 0.0, "mode": "cascade", "benchmark": "bench",
               "dataset_fingerprint": f"data{r // 2}", "small_model": "bench-small", "large_model": "bench-large",
               "single_model": None, "single_prompt": None, "s2": s2, "transfer": "full", "transfer_layer": None,
               "transfer_delta": None, "backend": "transformers", "n_shards": 8, "n_samples": SAMPLES_PER_RUN,
               "n_valid": SAMPLES_PER_RUN, "n_errors": 0, "n_generations_needed": 0, "n_generations_computed": 0,
               "n_generations_reused": 0, "routed_mv1": 0, "routed_mv2": 0, "routed_rt": 0, "git_commit": None,
               "config_json": "{}", "versions_json": "{}"}
        # a synthetic run's manifest: only its id (no reader of these runs looks further)
        write_manifest(home, run_id, cast("RunManifest", {"run_id": run_id, "shard_paths": []}), row)
    return runs


def timed(function: Callable[[], object], repeats: int = 3) -> float:
    """Best of `repeats` (the first call also pays for a cold page cache)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return round(best, 3)


@dataclass(frozen=True)
class StoreQueries:
    """Seconds (best of 3) of the queries, lookups and accounting at this store size."""

    count_star_s: float
    group_by_kind_s: float
    one_sample_traces_s: float
    routing_counts_s: float
    s2_vs_non_s2_s: float
    run_lookup_stored_among_s: float
    run_lookup_read_r_texts_s: float
    run_accounting_s: float


@dataclass(frozen=True)
class StoreSize:
    """The store written at one size: rows, write and compaction time, files and bytes on disk."""

    generations: int
    batch_rows: int
    runs: int
    write_s: float
    files_before_full_compaction: int
    compact_s: float
    files: int
    generation_files: int
    disk_mb: float


def measure(home: Home) -> StoreQueries:
    small, large = MODELS
    one_shard = [gen_id("R", 0, i) for i in range(256)]
    # a new shard's identities of every stage: half stored, half new
    shard_ids = [gen_id(kind, m, i) for m, kind, _ in MIX for i in range(0, 1024, 2)]
    return StoreQueries(
        count_star_s=timed(lambda: query(home, "SELECT count(*) FROM generations")),
        group_by_kind_s=timed(lambda: query(home, "SELECT prompt_kind, count(*) FROM generations GROUP BY 1")),
        one_sample_traces_s=timed(lambda: query(
            home, "SELECT prompt_kind, text FROM generations WHERE sample_id = 'sample-1234'")),
        routing_counts_s=timed(lambda: query(home, load_saved("routing_counts"))),
        s2_vs_non_s2_s=timed(lambda: query(home, load_saved("s2_vs_non_s2"))),
        # a new run: which identities exist in its partitions (a fresh store object: nothing cached), then the
        # R texts its RT stage reads for one shard
        run_lookup_stored_among_s=timed(lambda: [GenerationStore(home).known_among(m, k, shard_ids)
                                                 for m in MODELS for k in ("S", "R", "S2", "RT")]),
        run_lookup_read_r_texts_s=timed(lambda: GenerationStore(home).read(small, "R", one_shard, ["text"])),
        run_accounting_s=timed(lambda: count_computed_by_run(
            home, "run-00000", [GenerationStore(home).directory(m, k) for m in (small, large)
                                for k in ("S", "R", "S2", "RT")])),
    )


def one_size(n: int, batch: int, root: Path) -> tuple[StoreSize, StoreQueries]:
    home = Home.at(root / f"store-{n}")
    write_s = write_generations(home, n, batch)
    runs = write_runs(home, n)
    build_catalog(home)
    before = {s.table: s for s in store_stats(home)}
    started = time.perf_counter()
    compact_store(home)
    compact_s = time.perf_counter() - started
    after = {s.table: s for s in store_stats(home)}
    size = StoreSize(generations=after["generations"].rows, batch_rows=batch, runs=runs,
                     write_s=round(write_s, 1), files_before_full_compaction=before["generations"].files,
                     compact_s=round(compact_s, 2), files=sum(s.files for s in after.values()),
                     generation_files=after["generations"].files,
                     disk_mb=round(sum(s.bytes for s in after.values()) / 2**20, 1))
    queries = measure(home)
    shutil.rmtree(home.root)
    return size, queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--batch", type=int, default=8, help="rows per written file (today's CPU batch: 8)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mai-store-scale-"))
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            size, queries = one_size(n, args.batch, root)
            print(json.dumps({"cpu_cores": os.cpu_count(), **asdict(size), **asdict(queries)}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
