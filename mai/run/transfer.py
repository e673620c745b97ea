"""`select_outputs`, the `select_rt` step of sparse RT: for the samples that reach RT, one large-model prefill
per sample captures the attention on the small model's reasoning at every requested layer (stored), then the
tokens covering `delta` of it at the run's layer are selected (stored). Returns sample_id -> selection_id."""

from __future__ import annotations

import time

from mai import progress
from mai.backends.registry import get_engine
from mai.backends.transformers_backend import TransformersEngine
from mai.evals.base import Benchmark
from mai.evals.registry import get_benchmark
from mai.plan import RunPlan
from mai.prompts import build_prompt
from mai.run.generate import StepResult, step_inputs
from mai.run.identities import capture_ids_of, selection_ids_for
from mai.run.jobs import StageJob
from mai.storage.attention import read_captures, write_captures, write_selections
from mai.storage.claims import ClaimBoard, compute_once
from mai.storage.generations import shared_store
from mai.storage.paths import Home
from mai.storage.rows import CaptureRow, GenerationRow, SelectionRow
from mai.storage.stored import stored_among
from mai.transfer import select_indices
from mai.types import REASONING_MARK, CaptureRequest, LayerCapture, Sample


def select_outputs(job: StageJob) -> StepResult:
    """The `select_rt` step: sample_id -> selection_id for the samples that reach RT, and how many captures and
    selections it computed. The large model's
    engine is taken only when a capture or a selection is missing (a stored step loads no model)."""
    ctx = job.plan
    benchmark = get_benchmark(ctx.benchmark)
    todo, answers = step_inputs(job)
    reasoning = {s.sample_id: answers["r_small"][s.sample_id].gen_id for s in todo}
    captures = capture_ids_of(ctx, benchmark, todo, reasoning)
    captured = _capture(job, benchmark, todo, reasoning, captures)
    selections, selected = _select(job, captures)
    return StepResult(selections, captured + selected)


def _large_engine(plan: RunPlan) -> TransformersEngine:
    engine = get_engine(plan.models["large"], "transformers")
    if not isinstance(engine, TransformersEngine):
        raise TypeError("attention capture needs the transformers engine of the large model")
    return engine


def _capture(job: StageJob, benchmark: Benchmark, todo: list[Sample], reasoning: dict[str, str],
                     captures: dict[str, str]) -> int:
    """One prefill per capture id that lacks a requested layer, each once across runs on the store; returns how
    many this step captured."""
    ctx = job.plan
    home, large, layers = Home.at(ctx.home), ctx.models["large"], set(ctx.capture_layers)
    by_capture = {captures[s.sample_id]: s for s in todo}

    def compute(capture_ids: list[str]) -> None:
        # layer -> the captures that lack it (a capture is stored per layer: asked through the one lookup)
        lacking = {layer: set(capture_ids) - stored_among(ctx.home, large, "capture", capture_ids, [layer])
                   for layer in layers}
        pending = [by_capture[cid] for cid in capture_ids]
        missing_layers = {layer for layer, ids in lacking.items() if ids}
        engine = _large_engine(ctx)
        texts = shared_store(ctx.home).read(ctx.models["small"], "R", (reasoning[s.sample_id] for s in pending),
                                            ["text", "output_token_ids"])
        requests = [_capture_request(engine, benchmark, s, captures[s.sample_id], texts[reasoning[s.sample_id]])
                    for s in pending]
        started = time.perf_counter()
        results = engine.capture(requests, missing_layers, ctx.config.batch_size)
        elapsed = time.perf_counter() - started
        rows = [_capture_row(r, by_capture[r.capture_id], reasoning, large.identity_name, ctx.run_id,
                             elapsed / len(requests))
                for r in results if r.capture_id in lacking[r.layer]]
        write_captures(home, large, rows)
        progress.count(job.ledger, captures=len(requests), capture_s=elapsed)

    return compute_once(ClaimBoard(home, f"attention/{large.slug}"), by_capture,
                        lambda ids: stored_among(ctx.home, large, "capture", ids, layers), compute)


def _capture_request(engine: TransformersEngine, benchmark: Benchmark, sample: Sample, capture: str,
                     stored: GenerationRow) -> CaptureRequest:
    """The stored output ids are used as they are when the large model's tokenizer reads them back as the
    same text (a shared tokenizer, as in the paper's pairs); otherwise the text is tokenised again."""
    ids = list(stored.get("output_token_ids") or [])
    if not ids or engine.decode(ids) != stored["text"]:
        ids = engine.encode(stored["text"])
    prompt = build_prompt(benchmark.format_question(sample), sample.image_paths, "RT", benchmark.answer_style(sample),
                          benchmark.rt_template(sample), REASONING_MARK)
    return CaptureRequest(capture_id=capture, sample_id=sample.sample_id, prompt=prompt, reasoning_ids=tuple(ids))


def _capture_row(result: LayerCapture, sample: Sample, reasoning: dict[str, str], model: str, run_id: str,
                 capture_s: float) -> CaptureRow:
    return {"capture_id": result.capture_id, "layer": result.layer, "sample_id": sample.sample_id, "model": model,
            "reasoning_gen_id": reasoning[sample.sample_id], "n_reasoning_tokens": len(result.token_ids),
            "prompt_tokens": result.prompt_tokens, "span_attention": sum(result.weights),
            "weights": list(result.weights), "head_span_attention": list(result.head_span_mass),
            "head_tokens_for_80": list(result.head_tokens_for_80), "token_ids": list(result.token_ids),
            "token_texts": list(result.token_texts), "run_id": run_id, "capture_s": capture_s}


def _select(job: StageJob, captures: dict[str, str]) -> tuple[dict[str, str], int]:
    ctx = job.plan
    home, large = Home.at(ctx.home), ctx.models["large"]
    layer, delta = ctx.config.transfer_layer, ctx.config.transfer_delta
    assert layer is not None  # validated in the plan
    selections = selection_ids_for(ctx, captures)
    capture_of = {sel: captures[sid] for sid, sel in selections.items()}

    def compute(selection_ids: list[str]) -> None:
        stored = read_captures(home, large, (capture_of[sel] for sel in selection_ids))
        engine = _large_engine(ctx)
        rows = [_selection_row(stored[(capture_of[sel], layer)], sel, delta, engine, ctx.run_id)
                for sel in selection_ids]
        write_selections(home, large, rows)

    computed = compute_once(ClaimBoard(home, f"selections/{large.slug}"), capture_of,
                            lambda ids: stored_among(ctx.home, large, "selection", ids), compute)
    return selections, computed


def _selection_row(capture: CaptureRow, selection: str, delta: float, engine: TransformersEngine, run_id: str
                   ) -> SelectionRow:
    kept = select_indices(capture["weights"], delta)
    ids = [capture["token_ids"][i] for i in kept]
    text = engine.decode(ids)
    n = capture["n_reasoning_tokens"]
    return {"selection_id": selection, "capture_id": capture["capture_id"], "layer": capture["layer"], "delta": delta,
            "sample_id": capture["sample_id"], "model": capture["model"], "n_reasoning_tokens": n,
            "n_selected": len(ids), "share_selected": len(ids) / n if n else 0.0,
            "span_attention": capture["span_attention"], "selected_token_ids": ids, "transferred_text": text,
            "transferred_tokens": len(ids), "run_id": run_id}
