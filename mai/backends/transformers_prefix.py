"""Prefix reuse in the transformers backend: keep each prompt's prefill in the model's PrefixStore, and continue
later prompts of the same image from it (why and when: mai/backends/prefix_kv.py). Family-specific position
bookkeeping (M-RoPE offsets for Qwen-VL) goes through the model's family (mai/backends/model_family.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mai.backends.model_family import ModelInputs
from mai.backends.prefix_kv import CachedPrefix, PrefixHit, PrefixStore
from mai.backends.transformers_batching import BatchRun, StepClock, eos_ids, greedy_settings, static_decode
from mai.backends.transformers_loading import LoadedModel
from mai.types import Decoding, GenRequest

if TYPE_CHECKING:
    from torch import Tensor


def reuses_prefixes(store: PrefixStore, model: LoadedModel, inputs: ModelInputs) -> bool:
    """Prefix reuse is on, and the model and inputs are of a family it is implemented for (it continues from a
    dynamic cache: not with `MAI_DECODE=static`)."""
    return store.enabled and not static_decode() and model.family.continues_prefixes(model.network, inputs)


def prefix_hits(store: PrefixStore, model: LoadedModel, batch: list[GenRequest], inputs: ModelInputs
                ) -> list[PrefixHit | None]:
    """Per row, the cached prompt it can continue from (None: prefill it in full)."""
    if not reuses_prefixes(store, model, inputs):
        return [None] * len(batch)
    hits = []
    for row, request in enumerate(batch):
        real = inputs["attention_mask"][row].bool()
        hits.append(store.find(request.prompt.image_paths, inputs["input_ids"][row][real].tolist(),
                               model.family.text_after_images(model.network, inputs, row)))
    return hits


def prefix_keeper(store: PrefixStore, model: LoadedModel, batch: list[GenRequest], inputs: ModelInputs
                  ) -> Callable[[Any], None] | None:
    """What keeps the prompts of `batch` (encoded as `inputs`) from their prefill's KV cache; None when they are not
    kept (reuse off, another family, or no prompt with an image)."""
    if not (reuses_prefixes(store, model, inputs) and any(r.prompt.image_paths for r in batch)):
        return None
    return lambda cache: keep_prefixes(store, model, batch, inputs, cache)


def keep_prefixes(store: PrefixStore, model: LoadedModel, batch: list[GenRequest], inputs: ModelInputs,
                  cache: Any) -> None:
    """Each prompt's keys and values (its columns of the left-padded batch) and position offset, for this model's
    later prompts of the same image."""
    width = inputs["input_ids"].shape[1]
    per_token = sum(2 * layer.keys[0, :, 0].nelement() * layer.keys.element_size() for layer in cache.layers)
    if per_token * int(inputs["attention_mask"].sum()) > store.max_bytes:
        return  # the batch's prompts would only evict each other (real-size models at the default bound)
    offsets = model.family.position_offsets(model.network, len(batch))  # set by this batch's prefill
    for row, request in enumerate(batch):
        if not request.prompt.image_paths:
            continue
        start = width - int(inputs["attention_mask"][row].sum())
        store.put(request.prompt.image_paths, CachedPrefix(
            token_ids=tuple(inputs["input_ids"][row, start:].tolist()),
            keys=tuple(layer.keys[row, :, start:width].clone() for layer in cache.layers),
            values=tuple(layer.values[row, :, start:width].clone() for layer in cache.layers),
            rope_delta=offsets[row]))


def continue_from_prefixes(model: LoadedModel, rows: list[int], found: list[PrefixHit], inputs: ModelInputs,
                           decoding: Decoding, started: float) -> BatchRun:
    """Prefill only what follows each row's cached prefix, timed from `started` (when the batch's call began).
    Layout per row: left padding, the cached prefix (right-aligned at the cache's end), padding, the rest of the
    prompt (right-aligned at the end), so every row's cache ends at one column and every row's last prompt token is
    the batch's last column; padding is masked, and positions count only real tokens."""
    import torch

    network = model.network
    prompts = [inputs["input_ids"][r][inputs["attention_mask"][r].bool()].tolist() for r in rows]
    cached = [hit.tokens for hit in found]
    input_ids, mask = _continuation_layout(prompts, cached, int(network.generation_config.pad_token_id))
    cache_width, width = max(cached), len(input_ids[0])
    cache = _prefix_cache(found, cache_width, network)
    # each row continues at its own prefix's position offset, not the one the model kept from its last prefill
    model.family.restore_position_offsets(network, [hit.prefix.rope_delta for hit in found])
    clock = StepClock(eos_ids(network), len(rows), started)
    output = network.generate(input_ids=torch.tensor(input_ids, device=network.device),
                              attention_mask=torch.tensor(mask, device=network.device), past_key_values=cache,
                              **greedy_settings(decoding, network), stopping_criteria=[clock])
    ended = time.perf_counter()
    return BatchRun(rows=rows, new_tokens=output[:, width:].tolist(), prompt_tokens=[len(p) for p in prompts],
                    cached_tokens=cached, clock=clock, ended=ended)


def _continuation_layout(prompts: list[list[int]], cached: list[int], pad_id: int
                         ) -> tuple[list[list[int]], list[list[int]]]:
    """(input ids, attention mask) of the continuation batch: per row padding, cached prefix, padding, rest."""
    rests = [prompt[n:] for prompt, n in zip(prompts, cached)]
    cache_width, rest_width = max(cached), max(len(rest) for rest in rests)
    input_ids, mask = [], []
    for prompt, n, rest in zip(prompts, cached, rests):
        gap, tail_gap = cache_width - n, rest_width - len(rest)
        input_ids.append([pad_id] * gap + prompt[:n] + [pad_id] * tail_gap + rest)
        mask.append([0] * gap + [1] * n + [0] * tail_gap + [1] * len(rest))
    return input_ids, mask


def _prefix_cache(found: list[PrefixHit], cache_width: int, network: Any) -> Any:
    """A DynamicCache of every row's cached prefix, cropped to its hit and left-padded to `cache_width`."""
    import torch
    from torch.nn.functional import pad as pad_tensor
    from transformers import DynamicCache

    def stacked(blocks: list[Tensor]) -> Tensor:
        """One layer's keys (or values) of every row."""
        return torch.stack([pad_tensor(block[:, :hit.tokens], (0, 0, cache_width - hit.tokens, 0))
                            for block, hit in zip(blocks, found)])

    layers = [(stacked([hit.prefix.keys[layer] for hit in found]),
               stacked([hit.prefix.values[layer] for hit in found]))
              for layer in range(len(found[0].prefix.keys))]
    return DynamicCache(ddp_cache_data=layers, config=network.config)
