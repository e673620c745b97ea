"""The reference backend: transformers in-process, batched greedy generation with left padding.

float32 on CPU (batched == unbatched greedy holds in float32, not in bfloat16: tests/test_speedup.py,
`mai parity`), the checkpoint's dtype choice on GPU is whatever the ModelSpec says. On the CPU every call runs on
the process's one compute thread (mai/backends/compute.py). Per call it records prompt tokens, output tokens, time to first token
(prefill + first token, measured by a stopping criterion that sees every decoding step), decode time and
wall time. Rows of one batch share the prefill, so they share the TTFT; each row's decode time ends at
the step where that row finished. A prompt whose image + question prefix this model already prefilled continues
from that prefill (mai/backends/prefix_kv.py) and records the reused tokens as `cached_prompt_tokens`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mai import stop
from mai.backends import prefix_kv
from mai.backends.base import EngineCounters
from mai.backends.compute import on_compute_thread, uses_compute_thread
from mai.backends.prefix_kv import CachedPrefix, PrefixHit, PrefixStore
from mai.backends.processor import PROCESSED_IMAGES, ImageOnlyProcessor, load_processor
from mai.types import (
    REASONING_MARK,
    CaptureRequest,
    Decoding,
    FinishReason,
    GenRequest,
    GenResult,
    LayerCapture,
    ModelSpec,
)


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


T = TypeVar("T")


@dataclass
class _Run:
    """One generate call over some rows of a batch (positions in the batch), before results are built."""

    rows: list[int]
    new_tokens: list[list[int]]
    prompt_tokens: list[int]
    cached_tokens: list[int]
    clock: StepClock
    ended: float
    compute_s: float
    tokenizer: Any

# transformers' lazy module imports are not thread-safe (two engines loading at once in the MV1 stage
# saw "cannot import name AutoModelForImageTextToText"): loads are serialised process-wide
_LOAD_LOCK = threading.Lock()


class TransformersEngine:
    backend = "transformers"

    def __init__(self, model: ModelSpec) -> None:
        self.model = model
        self.counters = EngineCounters()
        self._lock = threading.Lock()  # one generate at a time: the model keeps per-call state (rope_deltas)
        self._loaded: tuple[Any, Any, Any] | None = None
        self.prefixes = PrefixStore(prefix_kv.PREFIX_CACHE_BYTES)  # this model's image + question prefills

    def _load(self) -> tuple[Any, Any, Any]:
        def load() -> tuple[Any, Any, Any]:
            with _LOAD_LOCK:
                return self._load_once()

        return self._compute(load)

    @staticmethod
    def _compute(fn: Callable[[], T]) -> T:
        """`fn()` where this process computes on the CPU: its one compute thread (mai.backends.compute)."""
        import torch

        return on_compute_thread(fn) if uses_compute_thread("cuda" if torch.cuda.is_available() else "cpu") else fn()

    def _load_once(self) -> tuple[Any, Any, Any]:
        if self._loaded is None:
            import torch
            from transformers import AutoModelForImageTextToText, AutoTokenizer

            started = time.perf_counter()
            if self.model.name_or_path.startswith("random:"):
                import tempfile
                from pathlib import Path

                from mai.backends.architectures import build_random_architecture

                device = "cuda" if torch.cuda.is_available() else "cpu"
                self._loaded = build_random_architecture(self.model.name_or_path, getattr(torch, self.model.dtype),
                                                         device, Path(tempfile.mkdtemp(prefix="mai-arch-")))
                self.counters.load_s = time.perf_counter() - started
                return self._loaded
            revision = None if self.model.local else self.model.revision
            path = self.model.name_or_path
            tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, padding_side="left")
            processor = load_processor(path, revision, tokenizer)
            dtype = getattr(torch, self.model.dtype)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            network = AutoModelForImageTextToText.from_pretrained(path, revision=revision, dtype=dtype)
            network = network.to(device).eval()  # type: ignore[arg-type]  # transformers' stub of .to
            self._loaded = (network, processor, tokenizer)
            self.counters.load_s = time.perf_counter() - started
        return self._loaded

    def generate(
        self, requests: list[GenRequest], batch_size: int, on_batch: Callable[[list[GenResult]], None] | None = None
    ) -> list[GenResult]:
        results: list[GenResult] = []
        for start in range(0, len(requests), batch_size):
            stop.check()
            batch = self._generate_batch(requests[start : start + batch_size])
            if on_batch is not None:
                on_batch(batch)
            results.extend(batch)
        return results

    def _generate_batch(self, batch: list[GenRequest]) -> list[GenResult]:
        decoding = batch[0].decoding
        if any(r.decoding != decoding for r in batch):
            raise ValueError("one batch must share its decoding parameters")
        runs = self._compute(lambda: self._generate_on_device(batch, decoding))
        results: dict[int, GenResult] = {}
        for run in runs:
            self.counters.add(len(run.rows), run.compute_s)
            for position, row in enumerate(run.rows):
                results[row] = _result(batch[row], run.new_tokens[position], run.prompt_tokens[position],
                                       run.cached_tokens[position], run.clock, position, run.ended, run.tokenizer,
                                       len(run.rows))
        return [results[row] for row in range(len(batch))]

    def _generate_on_device(self, batch: list[GenRequest], decoding: Decoding) -> list[_Run]:
        """The batch's generations: rows whose image + question prefix this model has cached continue from it
        (mai/backends/prefix_kv.py), the others prefill in full; a batch with both runs as two."""
        with self._lock:
            network, processor, tokenizer = self._load()
            inputs = self._encode(batch, processor, network.device)
            hits = self._prefix_hits(batch, inputs, network)
            continued = [row for row, hit in enumerate(hits) if hit is not None]
            fresh = [row for row, hit in enumerate(hits) if hit is None]
            runs = []
            if fresh:  # mixed batch: the uncached rows encoded on their own (their images come from PROCESSED_IMAGES)
                fresh_inputs = inputs if not continued else self._encode([batch[r] for r in fresh], processor,
                                                                         network.device)
                runs.append(self._prefill_and_generate(batch, fresh, fresh_inputs, network, tokenizer, decoding))
            if continued:
                found = [hit for hit in hits if hit is not None]
                runs.append(self._continue_and_generate(continued, found, inputs, network, tokenizer, decoding))
            return runs

    def _prefill_and_generate(self, batch: list[GenRequest], rows: list[int], inputs: Any, network: Any,
                              tokenizer: Any, decoding: Decoding) -> _Run:
        keep = self._reuses_prefixes(network, inputs) and any(batch[r].prompt.image_paths for r in rows)
        started = time.perf_counter()
        clock = StepClock(_eos_ids(network), len(rows), started)
        kwargs = {**_generate_kwargs(decoding, network), "return_dict_in_generate": keep}  # keep: with the cache
        output = network.generate(**inputs, **kwargs, stopping_criteria=[clock])
        ended = time.perf_counter()
        sequences = output.sequences if keep else output
        if keep:
            self._keep_prefixes([batch[r] for r in rows], inputs, output.past_key_values, network)
        width = inputs["input_ids"].shape[1]
        return _Run(rows=rows, new_tokens=sequences[:, width:].tolist(),
                    prompt_tokens=[int(n) for n in inputs["attention_mask"].sum(dim=1).tolist()],
                    cached_tokens=[0] * len(rows), clock=clock, ended=ended,
                    compute_s=time.perf_counter() - started, tokenizer=tokenizer)

    def _keep_prefixes(self, batch: list[GenRequest], inputs: Any, cache: Any, network: Any) -> None:
        """Each prompt's keys and values (its columns of the left-padded batch) and M-RoPE offset, for this
        model's later prompts of the same image."""
        width = inputs["input_ids"].shape[1]
        per_token = sum(2 * layer.keys[0, :, 0].nelement() * layer.keys.element_size() for layer in cache.layers)
        if per_token * int(inputs["attention_mask"].sum()) > self.prefixes.max_bytes:
            return  # the batch's prompts would only evict each other (real-size models at the default bound)
        deltas = network.model.rope_deltas.view(-1).tolist()  # set by this batch's prefill
        for row, request in enumerate(batch):
            if not request.prompt.image_paths:
                continue
            start = width - int(inputs["attention_mask"][row].sum())
            self.prefixes.put(request.prompt.image_paths, CachedPrefix(
                token_ids=tuple(inputs["input_ids"][row, start:].tolist()),
                keys=tuple(layer.keys[row, :, start:width].clone() for layer in cache.layers),
                values=tuple(layer.values[row, :, start:width].clone() for layer in cache.layers),
                rope_delta=int(deltas[row])))

    def _reuses_prefixes(self, network: Any, inputs: Any) -> bool:
        """Prefix reuse is on, and the model and inputs are of the family it is implemented and tested for: Qwen-VL
        (M-RoPE offsets kept as model state, image tokens marked in `mm_token_type_ids`)."""
        return self.prefixes.enabled and _keeps_rope_deltas(network) and "mm_token_type_ids" in inputs

    def _prefix_hits(self, batch: list[GenRequest], inputs: Any, network: Any) -> list[PrefixHit | None]:
        if not self._reuses_prefixes(network, inputs):
            return [None] * len(batch)
        hits = []
        for row, request in enumerate(batch):
            real = inputs["attention_mask"][row].bool()
            vision = inputs["mm_token_type_ids"][row][real].nonzero()
            first_text_after_images = int(vision[-1]) + 1 if len(vision) else 0
            hits.append(self.prefixes.find(request.prompt.image_paths, inputs["input_ids"][row][real].tolist(),
                                           first_text_after_images))
        return hits

    def _continue_and_generate(self, rows: list[int], found: list[PrefixHit], inputs: Any, network: Any,
                               tokenizer: Any, decoding: Decoding) -> _Run:
        """Prefill only what follows each row's cached prefix. Layout per row: left padding, the cached prefix
        (right-aligned at the cache's end), padding, the rest of the prompt (right-aligned at the end), so every
        row's cache ends at one column and every row's last prompt token is the batch's last column; padding is
        masked, and positions count only real tokens."""
        import torch
        from torch.nn.functional import pad as pad_tensor
        from transformers import DynamicCache

        prompts = [inputs["input_ids"][r][inputs["attention_mask"][r].bool()].tolist() for r in rows]
        cached = [hit.tokens for hit in found]
        rests = [prompt[n:] for prompt, n in zip(prompts, cached)]
        cache_width, rest_width = max(cached), max(len(rest) for rest in rests)
        pad_id = int(network.generation_config.pad_token_id)
        input_ids, mask = [], []
        for prompt, n, rest in zip(prompts, cached, rests):
            gap, tail_gap = cache_width - n, rest_width - len(rest)
            input_ids.append([pad_id] * gap + prompt[:n] + [pad_id] * tail_gap + rest)
            mask.append([0] * gap + [1] * n + [0] * tail_gap + [1] * len(rest))
        device = network.device
        started = time.perf_counter()

        def stacked(blocks: list[Any]) -> Any:
            """One layer's keys (or values) of every row's cached prefix, cropped and left-padded to the cache's
            width."""
            return torch.stack([pad_tensor(block[:, :hit.tokens], (0, 0, cache_width - hit.tokens, 0))
                                for block, hit in zip(blocks, found)])

        layers = [(stacked([hit.prefix.keys[layer] for hit in found]),
                   stacked([hit.prefix.values[layer] for hit in found]))
                  for layer in range(len(found[0].prefix.keys))]
        cache = DynamicCache(ddp_cache_data=layers, config=network.config)
        # the M-RoPE offset of each row's own prefix: the model keeps the last prefill's (mai/backends/prefix_kv.py)
        network.model.rope_deltas = torch.tensor([[hit.prefix.rope_delta] for hit in found], device=device)
        clock = StepClock(_eos_ids(network), len(rows), started)
        output = network.generate(input_ids=torch.tensor(input_ids, device=device),
                                  attention_mask=torch.tensor(mask, device=device), past_key_values=cache,
                                  **_generate_kwargs(decoding, network), stopping_criteria=[clock])
        ended = time.perf_counter()
        return _Run(rows=rows, new_tokens=output[:, cache_width + rest_width:].tolist(),
                    prompt_tokens=[len(prompt) for prompt in prompts], cached_tokens=cached, clock=clock,
                    ended=ended, compute_s=ended - started, tokenizer=tokenizer)

    def num_layers(self) -> int:
        network, _, _ = self._load()
        return int(network.config.get_text_config().num_hidden_layers)

    def capture(self, requests: list[CaptureRequest], layers: set[int], batch_size: int) -> list[LayerCapture]:
        """One prefill per request (batched, left-padded) recording the last position's attention over the
        reasoning tokens at every layer in `layers`."""
        results: list[LayerCapture] = []
        for start in range(0, len(requests), batch_size):
            stop.check()
            results.extend(self._capture_batch(requests[start : start + batch_size], layers))
        return results

    def _capture_batch(self, batch: list[CaptureRequest], layers: set[int]) -> list[LayerCapture]:
        import torch

        from mai.backends.attention import capturing

        def compute() -> tuple[Any, Any, Any]:
            with self._lock:
                network, processor, tokenizer = self._load()
                inputs, spans = self._encode_with_reasoning(batch, processor, tokenizer, network.device)
                started = time.perf_counter()
                with torch.no_grad(), capturing(network, layers) as captured:
                    network(**inputs)
                self.counters.add_capture(len(batch), time.perf_counter() - started)
                return tokenizer, inputs, (spans, captured)

        tokenizer, inputs, (spans, captured) = self._compute(compute)
        out = []
        for row, (request, (begin, end)) in enumerate(zip(batch, spans)):
            for layer in sorted(layers):
                per_head = captured[layer][row, :, begin:end].cpu()
                out.append(_layer_capture(request, layer, per_head, tokenizer, int(inputs["attention_mask"][row].sum())))
        return out

    @staticmethod
    def _encode_with_reasoning(batch: list[CaptureRequest], processor: Any, tokenizer: Any, device: Any
                               ) -> tuple[Any, list[tuple[int, int]]]:
        """Chat text split at the reasoning mark: the prefix goes through the processor (images expanded),
        the reasoning is inserted as its own token ids (no re-tokenisation drift), then the suffix."""
        import torch
        from PIL import Image

        prefixes, suffixes, images = [], [], []
        for request in batch:
            content: list[dict[str, str]] = [{"type": "image"} for _ in request.prompt.image_paths]
            content.append({"type": "text", "text": request.prompt.text})
            chat = processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                 add_generation_prompt=True)
            prefix, _, suffix = chat.partition(REASONING_MARK)
            prefixes.append(prefix)
            suffixes.append(suffix)
            images.append([Image.open(p).convert("RGB") for p in request.prompt.image_paths])
        encoded = processor(text=prefixes, images=images if any(images) else None, return_tensors="pt", padding=True)
        rows, spans = [], []
        for row, request in enumerate(batch):
            prefix_ids = encoded["input_ids"][row][encoded["attention_mask"][row].bool()].tolist()
            suffix_ids = tokenizer(suffixes[row], add_special_tokens=False)["input_ids"]
            rows.append(prefix_ids + list(request.reasoning_ids) + suffix_ids)
            spans.append((len(prefix_ids), len(prefix_ids) + len(request.reasoning_ids)))
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
                  "mm_token_type_ids": (input_ids == image_id).to(torch.int32)}
        inputs.update({k: v for k, v in encoded.items() if k in ("pixel_values", "image_grid_thw")})
        shifted = [(width - len(r) + begin, width - len(r) + end) for r, (begin, end) in zip(rows, spans)]
        return {k: v.to(device) for k, v in inputs.items()}, shifted

    def profile_point(self, resolution: int, query_tokens: int, output_tokens: int, repeats: int, seed: int = 0,
                      on_call: Callable[[], None] | None = None) -> dict[str, Any]:
        return self._compute(lambda: self._profile_point(resolution, query_tokens, output_tokens, repeats, seed,
                                                         on_call))

    def _profile_point(self, resolution: int, query_tokens: int, output_tokens: int, repeats: int, seed: int = 0,
                       on_call: Callable[[], None] | None = None) -> dict[str, Any]:
        """Paper tables 1-4 on simulated input: a random image of `resolution`^2 pixels and a query of
        `query_tokens` tokens; times input preprocessing, the vision encoder, and, within each generation forced to
        `output_tokens`, TTFT (start to the first token) and decoding (first token to the last, the other
        `output_tokens - 1` steps), after one warm-up. Both generation times come from the same call's step clock
        (a forced-N call minus a separate forced-1 call goes negative for short outputs, when the two calls' noise
        exceeds the few steps between them). `on_call` is called after each of the `profile_calls(repeats)` timed
        calls (progress)."""
        import numpy as np
        import torch
        from PIL import Image

        with self._lock:
            network, processor, tokenizer = self._load()
            rng = np.random.default_rng(seed)
            image = Image.fromarray(rng.integers(0, 256, (resolution, resolution, 3), dtype=np.uint8))
            word_ids = tokenizer(" image", add_special_tokens=False)["input_ids"]
            query = tokenizer.decode((word_ids * query_tokens)[:query_tokens])
            content = [{"type": "image"}, {"type": "text", "text": query}]
            text = processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                 add_generation_prompt=True)

            def preprocess() -> Any:
                return processor(text=[text], images=[[image]], return_tensors="pt", padding=True).to(network.device)

            inputs = preprocess()
            visual = getattr(network, "model", network)

            def vision() -> Any:
                with torch.no_grad():
                    return visual.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])

            produced: list[int] = []

            def forced() -> tuple[float, float]:
                """(TTFT, decode time) of one generation forced to `output_tokens` tokens."""
                started = time.perf_counter()
                clock = StepClock(set(), 1, started)
                with torch.no_grad():
                    out = network.generate(**inputs, max_new_tokens=output_tokens, min_new_tokens=output_tokens,
                                           do_sample=False, pad_token_id=network.generation_config.pad_token_id,
                                           stopping_criteria=[clock])
                produced.append(int(out.shape[1] - inputs["input_ids"].shape[1]))
                first = clock.first_token_at or time.perf_counter()
                return first - started, (clock.last_step_at or first) - first

            timings = {name: _repeat(fn, repeats, on_call) for name, fn in
                       (("preprocess", preprocess), ("vision", vision))}
            generations = _repeat_values(forced, repeats, on_call)
            timings["ttft"], timings["decode"] = [t for t, _ in generations], [d for _, d in generations]
        grid = inputs["image_grid_thw"][0]
        merge = int(getattr(processor.image_processor, "merge_size", 2)) ** 2
        return {"image_resolution": resolution, "image_tokens": int(grid.prod()) // merge, "query_tokens": query_tokens,
                "input_tokens": int(inputs["input_ids"].shape[1]), "output_tokens": produced[-1], "repeats": repeats,
                "timings": timings}

    def decode(self, token_ids: list[int]) -> str:
        _, _, tokenizer = self._load()
        text: str = tokenizer.decode(token_ids, skip_special_tokens=True)
        return text

    def encode(self, text: str) -> list[int]:
        _, _, tokenizer = self._load()
        ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    @staticmethod
    def _encode(batch: list[GenRequest], processor: Any, device: Any) -> Any:
        """Chat texts and images -> model inputs. With the image-only processor each image is processed once per
        process, whichever stage or model asks again (mai.backends.processor.PROCESSED_IMAGES)."""
        from PIL import Image

        texts = []
        for request in batch:
            content: list[dict[str, str]] = [{"type": "image"} for _ in request.prompt.image_paths]
            content.append({"type": "text", "text": request.prompt.text})
            messages = [{"role": "user", "content": content}]
            texts.append(processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        if isinstance(processor, ImageOnlyProcessor) and PROCESSED_IMAGES.max_bytes > 0:
            return processor.from_files(texts, [r.prompt.image_paths for r in batch]).to(device)
        images = [[Image.open(p).convert("RGB") for p in r.prompt.image_paths] for r in batch]
        has_images = any(images)
        encoded = processor(text=texts, images=images if has_images else None, return_tensors="pt", padding=True)
        return encoded.to(device)


def profile_calls(repeats: int) -> int:
    """Model calls one profile point makes: three measurements (preprocessing, vision encoder, a forced
    generation), each with a warm-up."""
    return 3 * (repeats + 1)


def _repeat(fn: Any, repeats: int, on_call: Callable[[], None] | None = None) -> list[float]:
    """Wall times of `repeats` calls of `fn` after a warm-up call."""
    def timed() -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    return _repeat_values(timed, repeats, on_call)


def _repeat_values(fn: Callable[[], T], repeats: int, on_call: Callable[[], None] | None = None) -> list[T]:
    """What `repeats` calls of `fn` return, after a warm-up call whose value is dropped."""
    values = []
    for index in range(repeats + 1):
        stop.check()
        value = fn()
        if index:
            values.append(value)
        if on_call is not None:
            on_call()
    return values


def _layer_capture(request: CaptureRequest, layer: int, per_head: Any, tokenizer: Any, prompt_tokens: int
                   ) -> LayerCapture:
    from mai.transfer import tokens_to_reach

    heads = [row.tolist() for row in per_head]
    return LayerCapture(
        capture_id=request.capture_id, layer=layer,
        weights=tuple(float(v) for v in per_head.mean(dim=0).tolist()),
        head_span_mass=tuple(float(sum(h)) for h in heads),
        head_tokens_for_80=tuple(tokens_to_reach(h, 0.8) for h in heads),
        token_ids=request.reasoning_ids,
        token_texts=tuple(tokenizer.decode([t]) for t in request.reasoning_ids),
        prompt_tokens=prompt_tokens,
    )


def _keeps_rope_deltas(network: Any) -> bool:
    """Qwen-VL models (M-RoPE), whose continuation from a cached prefix needs the prefix's `rope_deltas`."""
    return hasattr(getattr(network, "model", None), "rope_deltas")


def _eos_ids(network: Any) -> set[int]:
    eos = network.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos])


def _generate_kwargs(decoding: Decoding, network: Any) -> dict[str, Any]:
    if not decoding.greedy:
        raise ValueError("only greedy decoding is supported (the paper's setting)")
    return {
        "max_new_tokens": decoding.max_new_tokens,
        "min_new_tokens": decoding.min_new_tokens or None,
        "do_sample": False,
        "num_beams": 1,
        "pad_token_id": network.generation_config.pad_token_id,
        "return_dict_in_generate": False,
    }


def _result(
    request: GenRequest, tokens: list[int], prompt_tokens: int, cached_tokens: int, clock: StepClock, row: int,
    ended: float, tokenizer: Any, batch_size: int,
) -> GenResult:
    """Output tokens count up to and including the first end-of-sequence token (as vLLM counts them)."""
    stop_at = next((i for i, t in enumerate(tokens) if t in clock.eos_ids), None)
    kept = tokens if stop_at is None else tokens[: stop_at + 1]
    finish: FinishReason = "length" if stop_at is None else "stop"
    first = clock.first_token_at or ended
    finished = clock.finished_at[row] or ended
    return GenResult(
        token_ids=tuple(kept[:-1] if finish == "stop" else kept),
        gen_id=request.gen_id,
        text=tokenizer.decode(kept, skip_special_tokens=True),
        prompt_tokens=prompt_tokens,
        output_tokens=len(kept),
        finish_reason=finish,
        ttft_s=first - clock.start,
        decode_s=max(0.0, finished - first),
        wall_s=finished - clock.start,
        batch_size=batch_size,
        cached_prompt_tokens=cached_tokens,  # prefix tokens continued from this model's earlier prefill
    )
