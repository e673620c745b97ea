"""Real-size InternVL3.5 architectures with random weights (`random:internvl3.5-1b` ... `-14b`), for latency
profiling without checkpoints, as mai/backends/architectures.py does for Qwen3-VL.

Shapes, as the official `OpenGVLab/InternVL3_5-{1,2,4,8,14}B-HF` config.json files give them. They could not be
downloaded here (no hub access): the numbers are written from what is known of those files and of the language
models they embed (Qwen3-0.6B / 1.7B / 4B / 8B / 14B config.json) and of InternViT-300M-448px-V2_5, the vision
tower of every InternVL3.5 up to 14B:
- language model (Qwen3): hidden 1024/2048/2560/4096/5120, layers 28/28/36/36/40, attention heads
  16/16/32/32/40, 8 KV heads, head_dim 128, FFN 3072/6144/9728/12288/17408, vocabulary 151936, RoPE theta 1e6,
  q/k RMS norms, and a separate output head at every size: the InternVL3.5 checkpoints store `lm_head` apart
  from the input embeddings even where the plain Qwen3-0.6B / 1.7B / 4B tie them (the 1B's stored language
  model has 751,632,384 parameters, Qwen3-0.6B's 596,049,920 plus its 151936 x 1024 head);
- vision (InternViT-300M): 24 layers, hidden 1024, 16 heads, FFN 4096, 448 px tiles of 14 px patches, LayerNorm,
  qkv bias, layer scale 0.1;
- projector: pixel shuffle (downsample 0.5) to 256 tokens per tile, LayerNorm + MLP (4096 -> hidden -> hidden);
- preprocessing: dynamic tiles of 448 px, 1 to 12 of them, plus a thumbnail, ImageNet mean/std.
The parameter counts this gives are the model cards' (vision 0.3B; language 0.8 / 2.0 / 4.4 / 8.2 / 14.8B;
total 1.1 / 2.3 / 4.7 / 8.5 / 15.1B) and, for the 1B, the exact stored counts (751,632,384 language, 309.3M
vision tower and projector): tests/test_internvl_architectures.py. Tying the 1B-4B heads would give 0.6 / 1.7 /
4.0B language models and under-count memory by 0.16-0.39B parameters. The project's own tokenizer (with
InternVL's image tokens) stands in for the real one; its ids are valid in the 151936-entry vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class InternVLShape:
    """The language model's sizes; the vision tower and projector are shared by every size up to 14B."""

    hidden: int
    layers: int
    heads: int
    ffn: int


INTERNVL_SHAPES: dict[str, InternVLShape] = {
    "internvl3.5-1b": InternVLShape(hidden=1024, layers=28, heads=16, ffn=3072),
    "internvl3.5-2b": InternVLShape(hidden=2048, layers=28, heads=16, ffn=6144),
    "internvl3.5-4b": InternVLShape(hidden=2560, layers=36, heads=32, ffn=9728),
    "internvl3.5-8b": InternVLShape(hidden=4096, layers=36, heads=32, ffn=12288),
    "internvl3.5-14b": InternVLShape(hidden=5120, layers=40, heads=40, ffn=17408),
}
TILE = 448
PATCH = 14
MAX_TILES = 12
TOKENS_PER_TILE = 256  # (448 / 14)^2 * 0.5^2


def internvl_architecture_config(name: str, tokenizer: Any) -> Any:
    from transformers import InternVLConfig

    shape = INTERNVL_SHAPES[name]
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": shape.hidden, "intermediate_size": shape.ffn,
            "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads, "num_key_value_heads": 8,
            "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
            "attention_bias": False, "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "tie_word_embeddings": False, "pad_token_id": pad, "bos_token_id": None, "eos_token_id": eos}
    vision = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
              "image_size": [TILE, TILE], "patch_size": [PATCH, PATCH], "num_channels": 3, "hidden_act": "gelu",
              "attention_bias": True, "use_qk_norm": False, "norm_type": "layer_norm", "layer_norm_eps": 1e-6,
              "layer_scale_init_value": 0.1, "use_mean_pooling": True, "use_absolute_position_embeddings": True}
    return InternVLConfig(vision_config=vision, text_config=text, image_token_id=tokenizer.context_image_token_id,
                          image_seq_length=TOKENS_PER_TILE, downsample_ratio=0.5, projector_hidden_act="gelu",
                          vision_feature_layer=-1, vision_feature_select_strategy="default",
                          tie_word_embeddings=False)  # no InternVL3.5 checkpoint ties its output head


def with_random_weights(model: Any, tokenizer: Any, dtype: Any, device: str) -> Any:
    """A model made on the meta device, with seeded random weights on `device` in `dtype`, that decodes greedily and
    stops at <|im_end|> or <|endoftext|>: both families' real-size architectures (architectures.py too)."""
    import torch
    from transformers import GenerationConfig

    model = model.to_empty(device=device)
    torch.manual_seed(0)
    model.initialize_weights()
    model.tie_weights()
    model = model.to(dtype).eval()
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, do_sample=False)
    return model


def build_random_internvl(name: str, dtype: Any, device: str, workdir: Path) -> tuple[Any, Any, Any]:
    """(model, processor, tokenizer) of a real-size InternVL3.5 architecture with random weights."""
    import torch
    from transformers import InternVLForConditionalGeneration

    from mai.backends.internvl_processor import InternVLImageProcessorOnly
    from mai.backends.tiny_internvl import CHAT_TEMPLATE, build_image_processor, build_internvl_tokenizer

    tokenizer = build_internvl_tokenizer(workdir)
    tokenizer.padding_side = "left"
    with torch.device("meta"):
        model = InternVLForConditionalGeneration(internvl_architecture_config(name, tokenizer))
    model = with_random_weights(model, tokenizer, dtype, device)  # outside the meta device: real tensors
    image_processor = build_image_processor(MAX_TILES, tile=TILE)
    processor = InternVLImageProcessorOnly(image_processor=image_processor, tokenizer=tokenizer,
                                           image_seq_length=TOKENS_PER_TILE, chat_template=CHAT_TEMPLATE)
    return model, processor, tokenizer
