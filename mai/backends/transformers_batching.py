"""Batched greedy generation with left padding, and what each row's result records.

Per call it records prompt tokens, output tokens, time to first token (from the batch call's start, the prompts'
encoding included as a vLLM server includes it, to the first token, measured by a stopping criterion that sees
every decoding step), decode time and wall time. Rows of one batch share the prefill, so they share the TTFT; each
row's decode time ends at the step where that row finished.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, NotRequired, TypedDict, TypeVar

from mai import stop
from mai.backends.model_family import ModelInputs
from mai.backends.transformers_loading import LoadedModel
from mai.errors import ConfigError
from mai.host import one_minute_load
from mai.types import Decoding, FinishReason, GenRequest, GenResult

T = TypeVar("T")


class StepClock:
    """A stopping criterion that never stops: it timestamps each decoding step. A step costs one clock read and a
    stop check: which step finished a row is read from the row's tokens after the call (`finished_at`), so the
    decode loop never copies tokens to the host or loops over rows in Python (on a GPU, `.tolist()` on each step
    was a device synchronisation more per step), and it returns one all-False tensor per call, not a new one."""

    def __init__(self, eos_ids: set[int], batch: int, start: float) -> None:
        self.eos_ids = eos_ids
        self.start = start
        self.steps: list[float] = []  # when each new token (the first included) was there
        self._never: Any = None

    @property
    def first_token_at(self) -> float | None:
        return self.steps[0] if self.steps else None

    @property
    def last_step_at(self) -> float | None:
        return self.steps[-1] if self.steps else None

    def finished_at(self, new_tokens: list[int]) -> float | None:
        """When the row with these new tokens produced its first end-of-sequence token (None: it never did)."""
        stop_at = next((i for i, t in enumerate(new_tokens) if t in self.eos_ids), None)
        return None if stop_at is None or stop_at >= len(self.steps) else self.steps[stop_at]

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        stop.check()  # a stop request abandons the batch in flight at the next decoding step (nothing is stored)
        self.steps.append(time.perf_counter())
        if self._never is None:
            import torch

            self._never = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return self._never


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
    cache_implementation: NotRequired[str]


# `MAI_DECODE=static`: decode with a static KV cache (preallocated to the call's length), with which transformers
# compiles the decoding step on CUDA (torch.compile, CUDA graphs: one launch per step instead of hundreds of
# kernels launched from Python). `eager` (the default): the dynamic cache, which prefix reuse continues from.
DECODE_ENV = "MAI_DECODE"
DECODE_MODES = ("eager", "static")


def static_decode() -> bool:
    mode = os.environ.get(DECODE_ENV) or "eager"
    if mode not in DECODE_MODES:
        raise ConfigError(f"{DECODE_ENV}={mode!r}: choose one of {list(DECODE_MODES)}")
    return mode == "static"


def greedy_settings(decoding: Decoding, network: Any, with_cache: bool = False) -> GreedySettings:
    """`with_cache`: generate returns its output with the KV cache (for prefix reuse), not just the sequences."""
    if not decoding.greedy:
        raise ValueError("only greedy decoding is supported (the paper's setting)")
    settings: GreedySettings = {
        "max_new_tokens": decoding.max_new_tokens,
        "min_new_tokens": decoding.min_new_tokens or None,
        "do_sample": False,
        "num_beams": 1,
        "pad_token_id": network.generation_config.pad_token_id,
        "return_dict_in_generate": with_cache,
    }
    if static_decode():
        settings["cache_implementation"] = "static"
    return settings


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


def prefill_and_generate(model: LoadedModel, rows: list[int], inputs: ModelInputs, decoding: Decoding, started: float,
                         keep_cache: Callable[[Any], None] | None = None) -> BatchRun:
    """Generate for the batch rows `rows`, encoded as `inputs`, timed from `started` (when the batch's call
    began). `keep_cache`, if given, receives the KV cache of the call (prefix reuse keeps the prompts' part of it)."""
    network = model.network
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


def engine_version(device: Any) -> str:
    """The engine a stored time was measured with: the libraries that run the decode loop, where the call's clock
    starts (rows stored before it started ahead of the prompts' encoding say nothing: another regime), and how it
    decodes."""
    decode = ("static KV cache, compiled step" if device.type == "cuda" else "static KV cache") if static_decode() \
        else "dynamic KV cache"
    return f"{_libraries()}, {TIMED_FROM}, {decode}"


TIMED_FROM = "timed from prompt encoding"


@functools.cache
def _libraries() -> str:
    import torch
    import transformers

    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def with_measurement(results: list[GenResult], device: Any, load_start: float | None) -> list[GenResult]:
    """`results` saying how their times were measured: device, engine, the load at the call's start and now."""
    load_end = one_minute_load()
    return [replace(r, device=device_name(device), engine=engine_version(device), load_start=load_start, load_end=load_end)
            for r in results]


def _result(request: GenRequest, run: BatchRun, position: int, tokenizer: Any) -> GenResult:
    """Output tokens count up to and including the first end-of-sequence token (as vLLM counts them)."""
    tokens, clock = run.new_tokens[position], run.clock
    stop_at = next((i for i, t in enumerate(tokens) if t in clock.eos_ids), None)
    kept = tokens if stop_at is None else tokens[: stop_at + 1]
    finish: FinishReason = "length" if stop_at is None else "stop"
    first = clock.first_token_at or run.ended
    finished = clock.finished_at(tokens) or clock.last_step_at or run.ended
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
