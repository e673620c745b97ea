"""Attention capture for sparse RT: one prefill per request (batched, left-padded) over image + question + the small
model's reasoning (inserted as its own token ids) + the RT instruction, recording what the last position attends to
on the reasoning span at chosen layers (mai/backends/attention.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mai.backends.attention import capturing
from mai.backends.transformers_inputs import chat_text
from mai.backends.transformers_loading import LoadedModel
from mai.transfer import tokens_to_reach
from mai.types import REASONING_MARK, CaptureRequest, LayerCapture

if TYPE_CHECKING:
    from torch import Tensor

# (first, end) column of a row's reasoning tokens in the left-padded batch
Span = tuple[int, int]


def capture_inputs(batch: list[CaptureRequest], model: LoadedModel, device: Any) -> tuple[dict[str, Tensor], list[Span]]:
    """Chat text split at the reasoning mark: the prefix goes through the processor (images expanded), the
    reasoning is inserted as its own token ids (no re-tokenisation drift), then the suffix."""
    import torch
    from PIL import Image

    processor, tokenizer = model.processor, model.tokenizer
    prefixes, suffixes, images = [], [], []
    for request in batch:
        prefix, _, suffix = chat_text(processor, request.prompt).partition(REASONING_MARK)
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
    inputs = model.family.with_image_marks(input_ids, attention_mask, encoded, tokenizer)
    shifted = [(width - len(r) + begin, width - len(r) + end) for r, (begin, end) in zip(rows, spans)]
    return {name: tensor.to(device) for name, tensor in inputs.items()}, shifted


def last_row_attention(network: Any, inputs: dict[str, Tensor], layers: set[int]) -> dict[int, Tensor]:
    """layer -> the last position's attention (batch, heads, keys), for every layer in `layers`."""
    import torch

    with torch.no_grad(), capturing(network, layers) as captured:
        network(**inputs)
    return captured


def layer_captures(batch: list[CaptureRequest], spans: list[Span], captured: dict[int, Tensor],
                   inputs: dict[str, Tensor], layers: set[int], tokenizer: Any) -> list[LayerCapture]:
    """Per request, per layer of `layers` (ascending), its attention on the reasoning span."""
    out = []
    for row, (request, (begin, end)) in enumerate(zip(batch, spans)):
        for layer in sorted(layers):
            per_head = captured[layer][row, :, begin:end].cpu()
            out.append(_layer_capture(request, layer, per_head, tokenizer, int(inputs["attention_mask"][row].sum())))
    return out


def _layer_capture(request: CaptureRequest, layer: int, per_head: Tensor, tokenizer: Any, prompt_tokens: int
                   ) -> LayerCapture:
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
