"""Batched greedy generation with left padding, and what each row's result records.

Per call it records prompt tokens, output tokens, time to first token (prefill + first token, measured by a
stopping criterion that sees every decoding step), decode time and wall time. Rows of one batch share the prefill,
so they share the TTFT; each row's decode time ends at the step where that row finished.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypedDict, TypeVar

from mai import stop
from mai.backends.model_family import ModelInputs
from mai.backends.transformers_loading import LoadedModel
from mai.provenance import one_minute_load
from mai.types import Decoding, FinishReason, GenRequest, GenResult

T = TypeVar("T")


class StepClock:
    """A stopping criterion that never stops: it timestamps each decoding step and each row's finish."""

    def __init__(self, eos_ids: set[int], batch: int, start: float) -> None:
        self.eos_ids = eos_ids
        self.start = start
        self.first_token_at: float | None = None
        self.last_step_at: float | None = None
        self.finished_at: list[float | None] = [None] * batch

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        stop.check()  # a stop request abandons the batch in flight at the next decoding step (nothing is stored)
        now = time.perf_counter()
        self.last_step_at = now
        if self.first_token_at is None:
            self.first_token_at = now
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if self.finished_at[row] is None and token in self.eos_ids:
                self.finished_at[row] = now
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@dataclass
class BatchRun:
    """One generate call over some rows of a batch (positions in the batch), before results are built."""

    rows: list[int]
    new_tokens: list[list[int]]
    prompt_tokens: list[int]
    cached_tokens: list[int]
    clock: StepClock
    ended: float


class GreedySettings(TypedDict):
    """generate()'s decoding arguments for the paper's setting: greedy, one beam."""

    max_new_tokens: int
    min_new_tokens: int | None
    do_sample: bool
    num_beams: int
    pad_token_id: int
    return_dict_in_generate: bool


def greedy_settings(decoding: Decoding, network: Any, with_cache: bool = False) -> GreedySettings:
    """`with_cache`: generate returns its output with the KV cache (for prefix reuse), not just the sequences."""
    if not decoding.greedy:
        raise ValueError("only greedy decoding is supported (the paper's setting)")
    return {
        "max_new_tokens": decoding.max_new_tokens,
        "min_new_tokens": decoding.min_new_tokens or None,
        "do_sample": False,
        "num_beams": 1,
        "pad_token_id": network.generation_config.pad_token_id,
        "return_dict_in_generate": with_cache,
    }


def eos_ids(network: Any) -> set[int]:
    eos = network.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos])


def in_batches(items: list[T], batch_size: int) -> Iterator[list[T]]:
    """Consecutive batches of `items`; a stop request is honoured between batches."""
    for start in range(0, len(items), batch_size):
        stop.check()
        yield items[start : start + batch_size]


def shared_decoding(batch: list[GenRequest]) -> Decoding:
    decoding = batch[0].decoding
    if any(r.decoding != decoding for r in batch):
        raise ValueError("one batch must share its decoding parameters")
    return decoding


def prefill_and_generate(model: LoadedModel, rows: list[int], inputs: ModelInputs, decoding: Decoding,
                         keep_cache: Callable[[Any], None] | None = None) -> BatchRun:
    """Generate for the batch rows `rows`, encoded as `inputs`. `keep_cache`, if given, receives the KV cache of
    the call (prefix reuse keeps the prompts' part of it)."""
    network = model.network
    started = time.perf_counter()
    clock = StepClock(eos_ids(network), len(rows), started)
    settings = greedy_settings(decoding, network, with_cache=keep_cache is not None)
    output = network.generate(**inputs, **settings, stopping_criteria=[clock])
    ended = time.perf_counter()
    sequences = output if keep_cache is None else output.sequences
    if keep_cache is not None:
        keep_cache(output.past_key_values)
    width = inputs["input_ids"].shape[1]
    return BatchRun(rows=rows, new_tokens=sequences[:, width:].tolist(),
                    prompt_tokens=[int(n) for n in inputs["attention_mask"].sum(dim=1).tolist()],
                    cached_tokens=[0] * len(rows), clock=clock, ended=ended)


def batch_results(batch: list[GenRequest], runs: list[BatchRun], tokenizer: Any) -> list[GenResult]:
    """The results of `batch`, in its order, from the runs that together covered its rows."""
    results: dict[int, GenResult] = {}
    for run in runs:
        for position, row in enumerate(run.rows):
            results[row] = _result(batch[row], run, position, tokenizer)
    return [results[row] for row in range(len(batch))]


def device_name(device: Any) -> str:
    """'cpu', or 'cuda:0 (NVIDIA H100 80GB HBM3)': what a stored time was measured on."""
    if device.type == "cuda":
        import torch

        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


@functools.cache
def engine_version() -> str:
    """The engine a stored time was measured with: the libraries that run the decode loop."""
    import torch
    import transformers

    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def with_measurement(results: list[GenResult], device: Any, load_start: float | None) -> list[GenResult]:
    """`results` saying how their times were measured: device, engine, the load at the call's start and now."""
    load_end = one_minute_load()
    return [replace(r, device=device_name(device), engine=engine_version(), load_start=load_start, load_end=load_end)
            for r in results]


def _result(request: GenRequest, run: BatchRun, position: int, tokenizer: Any) -> GenResult:
    """Output tokens count up to and including the first end-of-sequence token (as vLLM counts them)."""
    tokens, clock = run.new_tokens[position], run.clock
    stop_at = next((i for i, t in enumerate(tokens) if t in clock.eos_ids), None)
    kept = tokens if stop_at is None else tokens[: stop_at + 1]
    finish: FinishReason = "length" if stop_at is None else "stop"
    first = clock.first_token_at or run.ended
    finished = clock.finished_at[position] or run.ended
    return GenResult(
        token_ids=tuple(kept[:-1] if finish == "stop" else kept),
        gen_id=request.gen_id,
        text=tokenizer.decode(kept, skip_special_tokens=True),
        prompt_tokens=run.prompt_tokens[position],
        output_tokens=len(kept),
        finish_reason=finish,
        ttft_s=first - clock.start,
        decode_s=max(0.0, finished - first),
        wall_s=finished - clock.start,
        batch_size=len(run.rows),
        cached_prompt_tokens=run.cached_tokens[position],  # prefix tokens continued from this model's earlier prefill
    )
