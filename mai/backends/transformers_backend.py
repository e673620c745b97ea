"""The reference backend: transformers in-process, batched greedy generation with left padding.

The engine is the per-model entry point (one per model per process, mai.backends.registry); each of its jobs lives
in its own module:
- transformers_loading.py   checkpoint or random architecture -> LoadedModel (network, processor, tokenizer, family),
                            and the thread model code runs on (the process's compute thread on the CPU)
- transformers_inputs.py    chat prompts -> model inputs
- transformers_batching.py  batched greedy generation, per-row token counts and timings
- transformers_prefix.py    prefix reuse: a prompt whose image + question prefix this model already prefilled
                            continues from that prefill (mai/backends/prefix_kv.py) and records the reused tokens
                            as `cached_prompt_tokens`
- transformers_capture.py   attention capture for sparse RT
- transformers_profiling.py latency profiling on simulated input
What differs between model families (image-token marks, position offsets, vision tensors) sits behind
mai/backends/model_family.py, one module per family (qwen_vl.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mai.backends import prefix_kv
from mai.backends.base import EngineCounters
from mai.backends.model_family import ModelInputs
from mai.backends.prefix_kv import PrefixStore
from mai.backends.transformers_batching import (
    BatchRun,
    batch_results,
    in_batches,
    prefill_and_generate,
    shared_decoding,
    with_measurement,
)
from mai.backends.transformers_capture import Span, capture_inputs, last_row_attention, layer_captures
from mai.backends.transformers_inputs import encode_prompts
from mai.backends.transformers_loading import LoadedModel, load_model, on_model_thread
from mai.backends.transformers_prefix import continue_from_prefixes, prefix_hits, prefix_keeper
from mai.backends.transformers_profiling import ProfilePoint, measure_profile_point
from mai.errors import ModelLoadError
from mai.host import host_name, one_minute_load
from mai.types import CaptureRequest, Decoding, GenRequest, GenResult, LayerCapture, ModelSpec

if TYPE_CHECKING:
    from torch import Tensor


class TransformersEngine:
    backend = "transformers"

    def __init__(self, model: ModelSpec) -> None:
        self.model = model
        self.counters = EngineCounters()
        # held for a whole call: the model keeps per-call state (Qwen-VL's M-RoPE offsets)
        self.lock = threading.Lock()
        self._loaded: LoadedModel | None = None
        self.prefixes = PrefixStore(prefix_kv.PREFIX_CACHE_BYTES)  # this model's image + question prefills

    def load(self) -> LoadedModel:
        """The model, loaded on first use (on the model thread)."""
        return on_model_thread(self._load_once)

    def _load_once(self) -> LoadedModel:
        if self._loaded is None:
            started = time.perf_counter()
            try:
                self._loaded = load_model(self.model)
            except Exception as error:  # the host's libraries, memory or GPU: a fanned-out run takes the host out
                raise ModelLoadError(f"model {self.model.identity_name} failed to load on host {host_name()} "
                                     f"({type(error).__name__}: {error})") from error
            self.counters.load_s = time.perf_counter() - started
        return self._loaded

    # --- generation ------------------------------------------------------------------------------------

    def generate(
        self, requests: list[GenRequest], batch_size: int, on_batch: Callable[[list[GenResult]], None] | None = None
    ) -> list[GenResult]:
        results: list[GenResult] = []
        for batch in in_batches(requests, batch_size):
            done = self._generate_batch(batch)
            if on_batch is not None:
                on_batch(done)
            results.extend(done)
        return results

    def _generate_batch(self, batch: list[GenRequest]) -> list[GenResult]:
        _injected_cuda_oom()
        decoding = shared_decoding(batch)
        load_start = one_minute_load()
        model, runs = on_model_thread(lambda: self._generate_on_device(batch, decoding))
        for run in runs:
            self.counters.add(len(run.rows))
        return with_measurement(batch_results(batch, runs, model.tokenizer), model.device, load_start)

    def _generate_on_device(self, batch: list[GenRequest], decoding: Decoding) -> tuple[LoadedModel, list[BatchRun]]:
        """The batch's generations: rows whose image + question prefix this model has cached continue from it
        (mai/backends/prefix_kv.py), the others prefill in full; a batch with both runs as two on a CPU, and as one
        full prefill on a GPU (`splits_mixed_batches`). Under torch's inference mode, as plain `generate` is run
        for speed (no version counters or view tracking on any tensor: 3-7 % of a tiny model's decoding step on the
        CPU, benchmarks/engine_step.py); the prefix cache holds inference tensors, read only here, in that mode."""
        import torch

        with self.lock, torch.inference_mode():
            model = self.load()
            # the call's clock starts before its prompts are encoded (image processing, tokenizing), as a vLLM
            # server's does: a stored time prices the whole call on either backend (docs/latency.md)
            started = time.perf_counter()
            inputs = encode_prompts(batch, model.processor, model.device)
            hits = prefix_hits(self.prefixes, model, batch, inputs)
            if None in hits and not splits_mixed_batches(model.device.type):
                hits = [None] * len(batch)
            fresh = [row for row, hit in enumerate(hits) if hit is None]
            continued = [row for row, hit in enumerate(hits) if hit is not None]
            runs = []
            if fresh:  # mixed batch: the uncached rows encoded on their own (their images come from PROCESSED_IMAGES)
                fresh_inputs = inputs if not continued else encode_prompts([batch[r] for r in fresh], model.processor,
                                                                           model.device)
                runs.append(self._prefill(model, [batch[r] for r in fresh], fresh, fresh_inputs, decoding, started))
            if continued:  # after the fresh rows on a CPU: the batch's rows wait for both runs, and their times say so
                found = [hit for hit in hits if hit is not None]
                runs.append(continue_from_prefixes(model, continued, found, inputs, decoding, started))
            return model, runs

    def _prefill(self, model: LoadedModel, requests: list[GenRequest], rows: list[int], inputs: ModelInputs,
                 decoding: Decoding, started: float) -> BatchRun:
        keep = prefix_keeper(self.prefixes, model, requests, inputs)
        return prefill_and_generate(model, rows, inputs, decoding, started, keep_cache=keep)

    # --- attention capture -----------------------------------------------------------------------------

    def num_layers(self) -> int:
        return int(self.load().network.config.get_text_config().num_hidden_layers)

    def capture(self, requests: list[CaptureRequest], layers: set[int], batch_size: int) -> list[LayerCapture]:
        """One prefill per request (batched, left-padded) recording the last position's attention over the
        reasoning tokens at every layer in `layers`."""
        results: list[LayerCapture] = []
        for batch in in_batches(requests, batch_size):
            results.extend(self._capture_batch(batch, layers))
        return results

    def _capture_batch(self, batch: list[CaptureRequest], layers: set[int]) -> list[LayerCapture]:
        def compute() -> tuple[LoadedModel, dict[str, Tensor], list[Span], dict[int, Tensor]]:
            with self.lock:
                model = self.load()
                inputs, spans = capture_inputs(batch, model, model.device)
                captured = last_row_attention(model.network, inputs, layers)
                return model, inputs, spans, captured

        model, inputs, spans, captured = on_model_thread(compute)
        return layer_captures(batch, spans, captured, inputs, layers, model.tokenizer)

    # --- profiling and tokens --------------------------------------------------------------------------

    def profile(self, resolution: int, query_tokens: int, output_tokens: int, repeats: int, seed: int = 0,
                on_call: Callable[[], None] | None = None) -> ProfilePoint:
        """One latency point (mai/backends/transformers_profiling.py)."""
        def measure() -> ProfilePoint:
            with self.lock:
                return measure_profile_point(self.load(), resolution, query_tokens, output_tokens, repeats, seed,
                                             on_call)

        return on_model_thread(measure)

    def decode(self, token_ids: list[int]) -> str:
        text: str = self.load().tokenizer.decode(token_ids, skip_special_tokens=True)
        return text

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.load().tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids


# TEST HOOK, for tests only (tests/test_cluster.py): a worker whose environment sets it raises torch's CUDA
# out-of-memory error at every batch, as a GPU whose memory another process holds would, on machines without a GPU
CUDA_OOM_TEST_HOOK = "MAI_TEST_INJECT_CUDA_OOM"


def _injected_cuda_oom() -> None:
    if os.environ.get(CUDA_OOM_TEST_HOOK) == "1":
        import torch

        raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB (injected by the test hook "
                                          f"{CUDA_OOM_TEST_HOOK})")


def splits_mixed_batches(device_type: str) -> bool:
    """Whether a batch whose rows partly continue from cached prefixes runs as two generate calls. On a CPU a decode
    step's cost grows with its rows, so the split saves the cached rows' prefill for little. On a GPU a step costs
    about the same for 25 rows as for 64 (an H100 decoded the 8B at 31 ms per step at batch 1 and 28 ms at batch
    32), so two calls double the decode time of the batch (the 2B's R stage ran at a mean batch of 39.5 of 64 there):
    one full prefill of every row is cheaper."""
    return device_type == "cpu"
