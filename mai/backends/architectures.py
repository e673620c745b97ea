"""Real-size Qwen3-VL architectures with random weights, for latency profiling without checkpoints.

`random:qwen3-vl-2b` (and 4b, 8b) name a model built in memory from the official configs' shapes (as published in their config.json:
text hidden 2048/2560/4096, layers 28/36/36, heads 16/32/32, 8 KV heads, head_dim 128, FFN 6144/9728/12288,
vocab 151936, vision depth 24/24/27, hidden 1024/1024/1152, deepstack [5,11,17]/[5,11,17]/[8,16,24]),
on the meta device first, then materialised on the target device and initialised (rope buffers are
garbage otherwise). Compute cost depends on shapes, not on trained values, so timings are representative.
The project's own tokenizer stands in for Qwen's (its ids are valid in the 151936-entry vocabulary), and
the image processor uses Qwen3-VL's real pixel budget (256^2 to 4096^2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mai.backends.architectures_internvl import INTERNVL_SHAPES, build_random_internvl, with_random_weights

PREFIX = "random:"


@dataclass(frozen=True)
class ArchitectureShape:
    """The sizes that differ between the Qwen3-VL checkpoints (the rest is shared: see `architecture_config`)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    tied: bool  # input and output embeddings share weights
    vision_depth: int
    vision_hidden: int
    vision_ffn: int
    deepstack: tuple[int, ...]  # vision layers whose features are also fed to the language model


SHAPES: dict[str, ArchitectureShape] = {
    "qwen3-vl-2b": ArchitectureShape(hidden=2048, layers=28, heads=16, ffn=6144, tied=True, vision_depth=24,
                                     vision_hidden=1024, vision_ffn=4096, deepstack=(5, 11, 17)),
    "qwen3-vl-4b": ArchitectureShape(hidden=2560, layers=36, heads=32, ffn=9728, tied=True, vision_depth=24,
                                     vision_hidden=1024, vision_ffn=4096, deepstack=(5, 11, 17)),
    "qwen3-vl-8b": ArchitectureShape(hidden=4096, layers=36, heads=32, ffn=12288, tied=False, vision_depth=27,
                                     vision_hidden=1152, vision_ffn=4304, deepstack=(8, 16, 24)),
}


def known_architectures() -> list[str]:
    """Every real-size architecture a `random:` name may give (Qwen3-VL here, InternVL3.5 in
    architectures_internvl.py)."""
    return [*SHAPES, *INTERNVL_SHAPES]


def is_random_architecture(name: str) -> bool:
    return name.startswith(PREFIX)


def architecture_name(name: str) -> str:
    return name.removeprefix(PREFIX)


def architecture_config(name: str, tokenizer: Any) -> Any:
    from transformers import Qwen3VLConfig

    shape = SHAPES[architecture_name(name)]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                            "<|vision_end|>", "<|endoftext|>", "<|im_end|>")}
    text = {"vocab_size": 151936, "hidden_size": shape.hidden, "intermediate_size": shape.ffn,
            "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads, "num_key_value_heads": 8,
            "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
            "attention_bias": False, "tie_word_embeddings": shape.tied, "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20],
                                "mrope_interleaved": True}}
    vision = {"depth": shape.vision_depth, "hidden_size": shape.vision_hidden,
              "intermediate_size": shape.vision_ffn, "num_heads": 16, "patch_size": 16, "temporal_patch_size": 2,
              "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": shape.hidden,
              "num_position_embeddings": 2304, "deepstack_visual_indexes": list(shape.deepstack),
              "hidden_act": "gelu_pytorch_tanh"}
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                         video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                         vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=shape.tied)


def build_random_architecture(name: str, dtype: Any, device: str, workdir: Path) -> tuple[Any, Any, Any]:
    """(model, processor, tokenizer) of a real-size architecture with random weights."""
    if architecture_name(name) in INTERNVL_SHAPES:
        return build_random_internvl(architecture_name(name), dtype, device, workdir)
    import torch
    from transformers import Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from mai.backends.processor import ImageOnlyProcessor
    from mai.backends.tiny_models import build_tokenizer

    tokenizer = build_tokenizer(workdir)
    tokenizer.padding_side = "left"
    config = architecture_config(name, tokenizer)
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    model = with_random_weights(model, tokenizer, dtype, device)  # outside the meta device: real tensors
    image_processor = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2,
                                               image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                               size={"shortest_edge": 256 * 256, "longest_edge": 4096 * 4096})
    return model, ImageOnlyProcessor(tokenizer, image_processor), tokenizer
