"""Latency profiling on simulated input (paper tables 1-4): a random image of `resolution`^2 pixels and a query of
`query_tokens` tokens; times input preprocessing, the vision encoder, and, within each generation forced to
`output_tokens`, TTFT (start to the first token) and decoding (first token to the last, the other
`output_tokens - 1` steps), after one warm-up. Both generation times come from the same call's step clock (a
forced-N call minus a separate forced-1 call goes negative for short outputs, when the two calls' noise exceeds the
few steps between them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mai import stop
from mai.backends.model_family import ModelInputs
from mai.backends.processor import UserTurn
from mai.backends.transformers_batching import StepClock
from mai.backends.transformers_loading import LoadedModel

T = TypeVar("T")


@dataclass(frozen=True)
class ProfileTimings:
    """Seconds of each timed call (warm-up excluded), per measurement."""

    preprocess: tuple[float, ...]
    vision: tuple[float, ...]
    ttft: tuple[float, ...]
    decode: tuple[float, ...]


@dataclass(frozen=True)
class ProfilePoint:
    image_resolution: int
    image_tokens: int
    query_tokens: int
    input_tokens: int
    output_tokens: int
    repeats: int
    timings: ProfileTimings


def profile_calls(repeats: int) -> int:
    """Model calls one profile point makes: three measurements (preprocessing, vision encoder, a forced
    generation), each with a warm-up."""
    return 3 * (repeats + 1)


def measure_profile_point(model: LoadedModel, resolution: int, query_tokens: int, output_tokens: int, repeats: int,
                          seed: int = 0, on_call: Callable[[], None] | None = None) -> ProfilePoint:
    """`on_call` is called after each of the `profile_calls(repeats)` timed calls (progress). Call it on the model
    thread, holding the engine's lock."""
    import torch

    image, text = _simulated_prompt(model, resolution, query_tokens, seed)

    def preprocess() -> Any:
        return model.processor(text=[text], images=[[image]], return_tensors="pt", padding=True).to(model.device)

    inputs = preprocess()

    def vision() -> Any:
        with torch.no_grad():
            return model.family.image_features(model.network, inputs)

    produced: list[int] = []

    def forced() -> tuple[float, float]:
        # TTFT from before preprocessing, as a run's stored calls (and a vLLM server's TTFT) count it, so that an
        # estimate from this profile prices what a measured call's time covers
        started = time.perf_counter()
        ttft_s, decode_s, tokens = _forced_generation(model.network, preprocess(), output_tokens, started)
        produced.append(tokens)
        return ttft_s, decode_s

    preprocess_s = repeat_timed(preprocess, repeats, on_call)
    vision_s = repeat_timed(vision, repeats, on_call)
    generations = repeat_values(forced, repeats, on_call)
    timings = ProfileTimings(preprocess=tuple(preprocess_s), vision=tuple(vision_s),
                             ttft=tuple(t for t, _ in generations), decode=tuple(d for _, d in generations))
    return ProfilePoint(image_resolution=resolution, image_tokens=model.family.image_tokens(model.processor, inputs),
                        query_tokens=query_tokens, input_tokens=int(inputs["input_ids"].shape[1]),
                        output_tokens=produced[-1], repeats=repeats, timings=timings)


def _simulated_prompt(model: LoadedModel, resolution: int, query_tokens: int, seed: int) -> tuple[Any, str]:
    """A random image and the chat text of a query of exactly `query_tokens` tokens (" image" repeated)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (resolution, resolution, 3), dtype=np.uint8))
    word_ids = model.tokenizer(" image", add_special_tokens=False)["input_ids"]
    query = model.tokenizer.decode((word_ids * query_tokens)[:query_tokens])
    turn: UserTurn = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": query}]}
    text: str = model.processor.apply_chat_template([turn], tokenize=False, add_generation_prompt=True)
    return image, text


def _forced_generation(network: Any, inputs: ModelInputs, output_tokens: int, started: float
                       ) -> tuple[float, float, int]:
    """(TTFT from `started`, decode time, tokens produced) of one generation forced to `output_tokens` tokens."""
    import torch

    clock = StepClock(set(), 1, started)
    with torch.no_grad():
        out = network.generate(**inputs, max_new_tokens=output_tokens, min_new_tokens=output_tokens,
                               do_sample=False, pad_token_id=network.generation_config.pad_token_id,
                               stopping_criteria=[clock])
    produced = int(out.shape[1] - inputs["input_ids"].shape[1])
    first = clock.first_token_at or time.perf_counter()
    return first - started, (clock.last_step_at or first) - first, produced


def repeat_timed(fn: Callable[[], object], repeats: int, on_call: Callable[[], None] | None = None) -> list[float]:
    """Wall times of `repeats` calls of `fn` after a warm-up call."""
    def timed() -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    return repeat_values(timed, repeats, on_call)


def repeat_values(fn: Callable[[], T], repeats: int, on_call: Callable[[], None] | None = None) -> list[T]:
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
