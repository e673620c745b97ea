"""Greedy speculative decoding for VLMs (paper table 12's baseline): the small model drafts k tokens, the
large model verifies them in one forward pass and keeps the longest agreeing prefix plus its own next
token. Both models see the image (transformers' assisted generation gives the draft no image: about zero
acceptance), and the output is the large model's own greedy output (lossless), token for token.

Batch size 1; both models' KV caches persist across rounds and are cropped to the accepted length.
Qwen3-VL keeps M-RoPE offsets (`rope_deltas`) from its prefill as model state, so each request holds both
engines' locks for its whole duration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mai import stop
from mai.backends.transformers_backend import TransformersEngine
from mai.backends.transformers_inputs import encode_prompts
from mai.errors import ConfigError
from mai.types import GenRequest


@dataclass(frozen=True)
class SpeculativeResult:
    gen_id: str
    token_ids: tuple[int, ...]  # without the end-of-sequence token
    finish_reason: str
    proposed: int
    accepted: int
    rounds: int
    wall_s: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def speculative_generate(large: TransformersEngine, small: TransformersEngine, request: GenRequest,
                         draft_tokens: int = 4) -> SpeculativeResult:
    import torch

    if draft_tokens < 1:
        raise ConfigError("draft tokens must be >= 1")
    with large.lock, small.lock:
        model_large, model_small = large.load(), small.load()
        started = time.perf_counter()  # encoding included, as in a batch call's stored times
        inputs = encode_prompts([request], model_large.processor, model_large.device)
        small_inputs = encode_prompts([request], model_small.processor, model_small.device)
        if not torch.equal(small_inputs["input_ids"], inputs["input_ids"]):
            raise ConfigError("speculative decoding needs models that share a tokenizer and processor")
        with torch.no_grad():
            result = _decode(model_large.network, model_small.network, inputs, request, draft_tokens)
        return SpeculativeResult(request.gen_id, *result, wall_s=time.perf_counter() - started)


def _step(network: Any, token_ids: list[int], cache: Any) -> Any:
    import torch

    start = cache.get_seq_length()
    ids = torch.tensor([token_ids], device=network.device)
    positions = torch.arange(start, start + len(token_ids), device=network.device)
    return network(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=positions).logits[0]


def _decode(net_large: Any, net_small: Any, inputs: Any, request: GenRequest, k: int
            ) -> tuple[tuple[int, ...], str, int, int, int]:
    eos = set(net_large.generation_config.eos_token_id)
    budget = request.decoding.max_new_tokens
    prompt = int(inputs["input_ids"].shape[1])
    out_large, out_small = net_large(**inputs, use_cache=True), net_small(**inputs, use_cache=True)
    cache_large, cache_small = out_large.past_key_values, out_small.past_key_values
    sequence = [int(out_large.logits[0, -1].argmax())]  # every emitted token is the large model's choice
    proposed = accepted = rounds = 0
    while len(sequence) < budget and not eos.intersection(sequence):
        stop.check()
        rounds += 1
        pending, draft = sequence[cache_small.get_seq_length() - prompt:], []
        for _ in range(min(k, budget - len(sequence))):
            token = int(_step(net_small, pending, cache_small)[-1].argmax())
            draft.append(token)
            pending = [token]
            if token in eos:
                break
        feed = sequence[cache_large.get_seq_length() - prompt:] + draft
        predictions = _step(net_large, feed, cache_large).argmax(dim=-1).tolist()
        offset = len(feed) - len(draft) - 1  # the prediction that follows the last confirmed token
        agreed = 0
        while agreed < len(draft) and predictions[offset + agreed] == draft[agreed]:
            agreed += 1
        proposed, accepted = proposed + len(draft), accepted + agreed
        sequence.extend(draft[:agreed] + [predictions[offset + agreed]])
        keep = prompt + len(sequence) - 1  # every token but the newest is confirmed and may stay cached
        for cache in (cache_large, cache_small):
            if cache.get_seq_length() > keep:
                cache.crop(keep - cache.get_seq_length())
    emitted: list[int] = []
    for token in sequence[:budget]:
        if token in eos:
            return tuple(emitted), "stop", proposed, accepted, rounds
        emitted.append(token)
    return tuple(emitted), "length", proposed, accepted, rounds
