"""The report's trace browser: per sample its image, question, options and reference, and for every run of the
report the route, the final answer, the score and each stage's output (the reasoning traces) with its tokens
and time; filters by run, route, category, right/wrong and "score changed between run A and run B".

The data is one JSON document in the page (generations shared by several runs are stored once); the browser
(`traces.js`, inlined) filters and pages it. A report over a large store embeds at most `limit` samples: first
the samples whose score is not the same in every run (so the "changed" filter is exact whenever they fit), then
the others in sample order; the page says how many it holds of how many.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from mai import cascade
from mai.dashboards.charts import Section, short
from mai.dashboards.rows import UsedRow
from mai.dashboards.sections import Store
from mai.dashboards.views import USED_GENERATIONS, fetch, run_label, run_models
from mai.evals.base import natural_order
from mai.storage.rows import SampleRow
from mai.types import Route, StageSpec

DEFAULT_LIMIT = 500
THUMBNAIL_PX = 128


def _stage_order() -> list[str]:
    """Stages in the order a run computes them (a sparse cascade with S2 has every pair stage; then a single
    model's)."""
    stages: list[StageSpec] = [*cascade.stages_for("cascade", True, transfer="sparse"),
                               *cascade.single_stages("large", "R", True)]
    return list(dict.fromkeys(stage.name for stage in stages))


STAGE_ORDER = _stage_order()
SELECT_RT = cascade.SELECT_RT.name

ROUTES = ("SELECT r.run_id, r.sample_id, r.route, r.final_answer, r.error, ru.dataset_fingerprint FROM routes r "
          "JOIN runs ru ON ru.run_id = r.run_id WHERE list_contains(?, r.run_id)")
# long id lists are joined (`IN (SELECT unnest(?))`, a hash join), never scanned per row (`list_contains`)
USED = (f"SELECT run_id, sample_id, stage, gen_id FROM ({USED_GENERATIONS}) "
        "WHERE list_contains(?, run_id) AND sample_id IN (SELECT unnest(?::VARCHAR[]))")
GENERATIONS = ("SELECT gen_id, model, prompt_kind, text, prompt_tokens, output_tokens, wall_s, batch_size, "
               "finish_reason, upstream_gen_id FROM generations WHERE gen_id IN (SELECT unnest(?::VARCHAR[]))")
SELECTIONS = ("SELECT selection_id, layer, delta, n_selected, n_reasoning_tokens, transferred_text, "
              "transferred_tokens FROM selections WHERE selection_id IN (SELECT unnest(?::VARCHAR[]))")
SAMPLES = ("SELECT * FROM samples WHERE list_contains(?, dataset_fingerprint) "
           "AND sample_id IN (SELECT unnest(?::VARCHAR[]))")


class RouteRow(TypedDict):
    run_id: str
    sample_id: str
    route: Route
    final_answer: str | None
    error: str | None
    dataset_fingerprint: str


class GenerationRow(TypedDict):
    gen_id: str
    model: str
    prompt_kind: str
    text: str
    prompt_tokens: int
    output_tokens: int
    wall_s: float | None
    batch_size: int | None
    finish_reason: str | None
    upstream_gen_id: str | None


class SelectionRow(TypedDict):
    selection_id: str
    layer: int
    delta: float
    n_selected: int
    n_reasoning_tokens: int
    transferred_text: str
    transferred_tokens: int


# --- the browser's JSON document (its shapes are traces.js's; lists keep it small) -----------------------------

# [model or layer, kind, text, prompt tokens, output tokens, seconds (batch-amortised), finish]
Generation = tuple[str, str, str, int | None, int | None, float | None, str | None]
Step = tuple[str, int]  # [stage, index into gens]
# [route, score, final answer, steps, error]
Outcome = tuple[Route, float | None, str | None, list[Step], str | None]
SampleKey = tuple[str, str]  # (dataset fingerprint, sample id)


class TraceRun(TypedDict):
    id: str
    short: str
    label: str
    models: str
    benchmark: str


class TraceSample(TypedDict):
    id: str
    category: str
    question: str
    options: list[str]
    reference: str
    error: str | None
    image: int | None       # index into `images`
    o: dict[str, Outcome]   # run index -> the sample's outcome in that run


class TraceDocument(TypedDict):
    runs: list[TraceRun]
    samples: list[TraceSample]
    gens: list[Generation]
    images: list[str | None]  # thumbnails as data URLs
    total_samples: int
    default_a: int
    default_b: int


class _Generations:
    """Every generation the document shows, stored once (runs share them), by index."""

    def __init__(self, store: Store, used: list[UsedRow]) -> None:
        ids = sorted({u["gen_id"] for u in used})
        self.rows = {g["gen_id"]: g for g in fetch(store.home, GenerationRow, GENERATIONS, [ids])}
        upstream = sorted({g["upstream_gen_id"] for g in self.rows.values()
                           if g["prompt_kind"] == "RT" and g["upstream_gen_id"]})
        self.selections = {s["selection_id"]: s for s in fetch(store.home, SelectionRow, SELECTIONS, [upstream])}
        self.index: dict[str, int] = {}
        self.cells: list[Generation] = []

    def ref(self, gen_id: str) -> int:
        if gen_id not in self.index:
            self.index[gen_id] = len(self.cells)
            self.cells.append(_generation(self.rows, self.selections, gen_id))
        return self.index[gen_id]

    def steps(self, used: UsedRow) -> list[Step]:
        """The stage's generation, and for RT over a selection the selection (shown as a step of its own)."""
        steps = [(used["stage"].removeprefix("gen_"), self.ref(used["gen_id"]))]
        generation = self.rows.get(used["gen_id"])
        upstream = generation["upstream_gen_id"] if generation else None
        if generation and upstream in self.selections and generation["prompt_kind"] == "RT":
            steps.append((SELECT_RT, self.ref(str(upstream))))
        return steps


def trace_data(store: Store, limit: int = DEFAULT_LIMIT, pair: Sequence[str] = ()) -> TraceDocument:
    """The browser's JSON document (see the module docstring)."""
    runs = store.runs
    index = {r["run_id"]: i for i, r in enumerate(runs)}
    routes = fetch(store.home, RouteRow, ROUTES, [list(index)])
    keys = sorted({(r["dataset_fingerprint"], r["sample_id"]) for r in routes}, key=lambda k: (k[0], natural_order(k[1])))
    chosen, total = _choose(store, routes, keys, limit)
    sample_ids = sorted({sid for _, sid in chosen})
    used = fetch(store.home, UsedRow, USED, [list(index), sample_ids]) if sample_ids else []
    generations = _Generations(store, used)
    stages: dict[tuple[str, str], list[Step]] = {}
    for u in used:
        stages.setdefault((u["run_id"], u["sample_id"]), []).extend(generations.steps(u))
    outcome: dict[str, dict[str, Outcome]] = {}  # "fingerprint/sample" -> run index -> outcome
    for r in routes:
        score = store.scores.get(r["run_id"], {}).get(r["sample_id"])
        steps = sorted(stages.get((r["run_id"], r["sample_id"]), []), key=lambda s: STAGE_ORDER.index(s[0]))
        outcome.setdefault(f"{r['dataset_fingerprint']}/{r['sample_id']}", {})[str(index[r["run_id"]])] = (
            r["route"], score, r["final_answer"], steps, r["error"])
    images: dict[str, int] = {}  # content hash -> index: benchmarks reuse images (POPE, MMBench's copies)
    thumbnails: list[str | None] = []
    samples = [_sample(store, row, outcome.get(f"{row['dataset_fingerprint']}/{row['sample_id']}", {}), images,
                       thumbnails) for row in _sample_rows(store, chosen)]
    a, b = (index.get(pair[0], 0), index.get(pair[1], min(1, len(runs) - 1))) if len(pair) == 2 else \
        (0, min(1, max(len(runs) - 1, 0)))
    return {"runs": [{"id": r["run_id"], "short": short(r["run_id"]), "label": run_label(r), "models": run_models(r),
                      "benchmark": r["benchmark"]} for r in runs],
            "samples": samples, "gens": generations.cells, "images": thumbnails, "total_samples": total,
            "default_a": a, "default_b": b}


def _choose(store: Store, routes: list[RouteRow], keys: list[SampleKey], limit: int) -> tuple[list[SampleKey], int]:
    scores: dict[SampleKey, set[float]] = {}
    for r in routes:
        score = store.scores.get(r["run_id"], {}).get(r["sample_id"])
        if score is not None:
            scores.setdefault((r["dataset_fingerprint"], r["sample_id"]), set()).add(score)
    changed = [k for k in keys if len(scores.get(k, ())) > 1]
    rest = [k for k in keys if len(scores.get(k, ())) <= 1]
    chosen = set((changed + rest)[:limit])
    return [k for k in keys if k in chosen], len(keys)


def _sample_rows(store: Store, chosen: list[SampleKey]) -> list[SampleRow]:
    if not chosen:
        return []
    rows = fetch(store.home, SampleRow, SAMPLES, [sorted({fp for fp, _ in chosen}),
                                                  sorted({sid for _, sid in chosen})])
    by_key = {(r["dataset_fingerprint"], r["sample_id"]): r for r in rows}
    return [by_key[k] for k in chosen if k in by_key]


def _generation(generations: dict[str, GenerationRow], selections: dict[str, SelectionRow], gen_id: str
                ) -> Generation:
    if gen_id in selections:
        s = selections[gen_id]
        return (f"layer {s['layer']}, delta {s['delta']:g}", "selection", s["transferred_text"],
                s["n_reasoning_tokens"], s["transferred_tokens"], None,
                f"{s['n_selected']} of {s['n_reasoning_tokens']} tokens kept")
    g = generations.get(gen_id)
    if g is None:
        return ("?", "?", f"(generation {gen_id} is not in the store)", None, None, None, None)
    wall_s, batch_size = g["wall_s"], g["batch_size"]
    seconds = wall_s / batch_size if wall_s is not None and batch_size else None
    return (g["model"], g["prompt_kind"], g["text"], g["prompt_tokens"], g["output_tokens"],
            round(seconds, 4) if seconds is not None else None, g["finish_reason"])


def _sample(store: Store, row: SampleRow, outcome: dict[str, Outcome], images: dict[str, int],
            thumbnails: list[str | None]) -> TraceSample:
    hashes = list(row["image_sha256"] or [])
    image = None
    if hashes or row["image_paths"]:
        key = hashes[0] if hashes else str((row["image_paths"] or [""])[0])
        if key not in images:
            images[key] = len(thumbnails)
            thumbnails.append(_thumbnail(store, row))
        image = images[key]
    return {"id": row["sample_id"], "category": row["category"], "question": row["question"],
            "options": list(row["options"] or []), "reference": " | ".join(row["references"] or [row["answer"]]),
            "error": row["error"], "image": image, "o": outcome}


def _thumbnail(store: Store, row: SampleRow) -> str | None:
    """The first image as a small JPEG data URL (the store's own image file, found by its content hash): 128 px,
    quality 70, ~5 KB a picture in the page."""
    from PIL import Image

    hashes, paths = list(row["image_sha256"] or []), list(row["image_paths"] or [])
    candidates = ([store.home.images / hashes[0][:2] / hashes[0]] if hashes else []) + [Path(p) for p in paths[:1]]
    for path in candidates:
        if not path.is_file():
            continue
        try:
            with Image.open(path) as image:
                picture = image.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError):
            continue  # a damaged asset: no thumbnail (`mai store verify` names it, `--repair` moves it aside)
        picture.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=70)
        return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
    return None


def trace_section(store: Store, limit: int = DEFAULT_LIMIT, pair: Sequence[str] = ()) -> tuple[Section, str]:
    """The section and its JSON document (the report puts it in a `<script type="application/json">`)."""
    data = trace_data(store, limit, pair)
    shown, total = len(data["samples"]), data["total_samples"]
    section = Section("traces", "Trace browser",
                      "Every stage's output for each sample and run: the reasoning traces, with tokens and time "
                      "(batch-amortised), the route and the score. Filters apply to the chosen run (or to any run); "
                      "'score changed' keeps the samples whose score differs between run A and run B (scores view, "
                      "default scorer profile).")
    if shown < total:
        section.notes.append(f"This report holds {shown} of {total} samples: first every sample whose score differs "
                             "between runs, then the others in order (`mai report --trace-samples N` holds more).")
    section.html = MARKUP
    return section, json.dumps(data, separators=(",", ":"), default=str)


MARKUP = """
<div class="trace-filters">
  <label>run <select id="tf-run"></select></label>
  <label>route <select id="tf-route"><option value="">any</option><option>MV1</option><option>MV2</option>
    <option>RT</option><option>SINGLE</option><option>ERROR</option></select></label>
  <label>category <select id="tf-category"><option value="">any</option></select></label>
  <label>answer <select id="tf-correct"><option value="">any</option><option value="right">right (score &ge; 0.5)</option>
    <option value="wrong">wrong</option></select></label>
  <label><input type="checkbox" id="tf-changed"> score changed between</label>
  <label>A <select id="tf-a"></select></label> <label>B <select id="tf-b"></select></label>
  <label>search <input type="search" id="tf-search" placeholder="sample id or question"></label>
</div>
<p class="trace-status"><span id="trace-count" data-count="0">0</span> samples match
  (page <span id="tf-page">1</span> of <span id="tf-pages">1</span>)
  <button id="tf-prev" type="button">previous</button> <button id="tf-next" type="button">next</button></p>
<div id="trace-list"></div>
"""
