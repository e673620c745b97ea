"""Built-in tiny InternVL-architecture models (`InternVLForConditionalGeneration`, the layout of the InternVL3.5
`-HF` checkpoints), built offline from a config like the tiny Qwen3-VL pair (mai/backends/tiny_models.py).

- Tokenizer: the project's byte-level BPE (Qwen2's pipeline, as InternVL3.5's Qwen3 tokenizer) plus InternVL's
  image tokens `<img>`, `</img>`, `<IMG_CONTEXT>` and `<video>` as atomic special tokens, named in the tokenizer's
  config (`start_image_token`, ...) where `InternVLProcessor` looks them up.
- Chat template: the InternVL3.5-HF layout (Qwen's `<|im_start|>role\n ... <|im_end|>\n` turns, an image as
  `<IMG_CONTEXT>\n` before the text), without the real template's default system message.
- Image processor: InternVL's dynamic high-resolution tiling (`GotOcr2ImageProcessor`: tiles of the vision tower's
  input size, 1 to MAX_TILES of them chosen by aspect ratio, a thumbnail when there is more than one, ImageNet
  mean/std, bicubic) with small tiles: 32 px tiles of 8 px patches, pixel-shuffled (downsample 0.5) to 4 tokens
  per tile; a 64 px demo image becomes 4 tiles + thumbnail = 20 image tokens.
- Model: a Qwen3 language model (head size 32, which vLLM's CPU kernels support) and a 2-layer InternViT; random
  weights, initialised as the Qwen pair's (wide, answer tokens larger) so that outputs depend on the input.
The processor files name the stock `InternVLProcessor` (what real checkpoints name): where torchvision is present
(vLLM's environment, GPU machines) the stock processor loads them; elsewhere InternVLImageProcessorOnly does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mai.backends.tiny_models import BUILDER_VERSION, answer_biased_init, build_tokenizer, is_current

SMALL_NAME = "mai-tiny-internvl-small"
LARGE_NAME = "mai-tiny-internvl-large"
BUILTIN_NAMES = (SMALL_NAME, LARGE_NAME)
BUILDER = f"internvl-{BUILDER_VERSION}.1"

IMAGE_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                "video_token": "<video>"}
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif part['type'] == 'video' %}{{ '<video>\\n' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TILE = 32
PATCH = 8
DOWNSAMPLE = 0.5
TOKENS_PER_TILE = int((TILE // PATCH) ** 2 * DOWNSAMPLE**2)
MAX_TILES = 6
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


@dataclass(frozen=True)
class TinySize:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    seed: int


SIZES = {
    SMALL_NAME: TinySize(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=128, seed=11),
    LARGE_NAME: TinySize(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, ffn=256, seed=12),
}
VISION = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}


def build_internvl_tokenizer(directory: Path) -> Any:
    """The project's BPE with InternVL's image tokens added (atomic) and named, and the InternVL chat template."""
    base = build_tokenizer(directory)
    base.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS.values())})
    return type(base)(tokenizer_object=base._tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                      bos_token=None, extra_special_tokens=dict(IMAGE_TOKENS), chat_template=CHAT_TEMPLATE)


def build_image_processor(max_tiles: int = MAX_TILES, tile: int = TILE) -> Any:
    from transformers.image_utils import PILImageResampling
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    return GotOcr2ImageProcessorPil(size={"height": tile, "width": tile}, crop_to_patches=True, min_patches=1,
                                    max_patches=max_tiles, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD,
                                    resample=PILImageResampling.BICUBIC)


def build_config(size: TinySize, tokenizer: Any) -> Any:
    """Every field written (the defaults are InternVL3-1B's, not these models')."""
    from transformers import InternVLConfig

    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = {"model_type": "qwen3", "vocab_size": len(tokenizer), "hidden_size": size.hidden,
            "intermediate_size": size.ffn, "num_hidden_layers": size.layers, "num_attention_heads": size.heads,
            "num_key_value_heads": size.kv_heads, "head_dim": size.head_dim, "hidden_act": "silu",
            "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "attention_bias": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0}, "tie_word_embeddings": True,
            "pad_token_id": pad, "bos_token_id": None, "eos_token_id": eos}
    vision = dict(VISION, image_size=[TILE, TILE], patch_size=[PATCH, PATCH], num_channels=3, hidden_act="gelu",
                  attention_bias=True, use_qk_norm=False, norm_type="layer_norm", layer_norm_eps=1e-6,
                  layer_scale_init_value=0.1, use_mean_pooling=True, use_absolute_position_embeddings=True)
    return InternVLConfig(vision_config=vision, text_config=text,
                          image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["context_image_token"]),
                          image_seq_length=TOKENS_PER_TILE, downsample_ratio=DOWNSAMPLE, projector_hidden_act="gelu",
                          vision_feature_layer=-1, vision_feature_select_strategy="default", tie_word_embeddings=True)


def build_model(name: str, directory: Path, tokenizer: Any, max_tiles: int = MAX_TILES) -> None:
    import torch
    from transformers import GenerationConfig, InternVLForConditionalGeneration

    from mai.backends.internvl_processor import InternVLImageProcessorOnly

    size = SIZES[name]
    torch.manual_seed(size.seed)
    model = InternVLForConditionalGeneration(build_config(size, tokenizer)).to(torch.float32).eval()  # type: ignore[arg-type]  # transformers' stub of .to
    answer_biased_init(model, tokenizer)
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, do_sample=False)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    processor = InternVLImageProcessorOnly(image_processor=build_image_processor(max_tiles), tokenizer=tokenizer,
                                           image_seq_length=TOKENS_PER_TILE, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(directory)
    processor.image_processor.save_pretrained(directory)
    name_stock_processor(directory)
    (directory / "mai_builtin.json").write_text(json.dumps({"name": name, "builder_version": BUILDER}))


def name_stock_processor(directory: Path) -> None:
    """The saved files name `InternVLProcessor`, as real checkpoints do (the class that wrote them is ours)."""
    for file in ("processor_config.json", "tokenizer_config.json"):
        path = directory / file
        if path.exists():
            config = json.loads(path.read_text())
            config["processor_class"] = "InternVLProcessor"
            path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build_builtin_internvl_models(models_dir: Path, force: bool = False) -> list[Path]:
    """Build both tiny InternVL models (shared tokenizer and processor settings) unless they already exist."""
    targets = [models_dir / name for name in BUILTIN_NAMES]
    if not force and all(is_current(t, BUILDER) for t in targets):
        return targets
    tokenizer = build_internvl_tokenizer(models_dir / "_tokenizer_internvl")
    for name, target in zip(BUILTIN_NAMES, targets):
        build_model(name, target, tokenizer)
    return targets
