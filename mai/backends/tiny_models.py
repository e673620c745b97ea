"""Built-in tiny Qwen3-VL-architecture models, built offline from a config (no download).

A small and a large model share one byte-level BPE tokenizer trained here with Qwen2's exact
pre-tokenization pipeline (otherwise `Qwen2Tokenizer` loses spaces on reload), Qwen's special tokens,
and one image processor with Qwen3-VL's real preprocessing (patch 16, merge 2, temporal 2, mean/std 0.5)
at a small pixel budget. Weights are random (seeded): the pipeline runs for real, the answers are noise.
The random init is wide (std 0.7 instead of 0.02, so outputs depend on the image and question instead of
repeating one token) and answer tokens (yes/no, A-D) get larger embeddings, so the noise often parses as
an answer: the two models then agree on some samples and not on others, and every cascade stage runs.
Every config field is written explicitly: `Qwen3VLConfig()` defaults match no real checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mai.evals.demo import generate_demo_rows
from mai.prompts import INSTRUCTIONS, RT_TEMPLATES

SMALL_NAME = "mai-tiny-small"
LARGE_NAME = "mai-tiny-large"
BUILTIN_NAMES = (SMALL_NAME, LARGE_NAME)
BUILDER_VERSION = "3"

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen-style chat template, images before text inside a user turn
CHAT_TEMPLATE = (
    "{%- for message in messages -%}<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
SIZES: dict[str, dict[str, int]] = {
    SMALL_NAME: {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128, "seed": 1},
    LARGE_NAME: {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "head_dim": 32, "ffn": 256, "seed": 2},
}
VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}


def tokenizer_corpus() -> list[str]:
    """Text the tokenizer is trained on: the paper's prompts, demo questions and reasoning-like prose."""
    prose = [
        "Let's think step by step. The image shows a shape. Therefore the answer is yes.",
        "First, identify the objects in the picture. Then count them and compare the colors.",
        "The question asks about the color of the square. Looking at the image, it is blue, so [[B]].",
        "There is no red circle in the image, so the answer is no. [[no]] [[yes]] [[A]] [[C]] [[D]]",
    ]
    questions = [f"{r['question']} A. {r['A']} B. {r['B']} C. {r['C']} D. {r['D']}" for r in generate_demo_rows(60, 0)]
    return prose * 20 + questions * 5 + list(INSTRUCTIONS.values()) * 10 + list(RT_TEMPLATES.values()) * 10


def build_tokenizer(directory: Path, vocab_size: int = 1024, corpus: list[str] | None = None) -> Any:
    """A byte-level BPE over `corpus` (default: the random pair's corpus), loadable as Qwen2's tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast  # type: ignore[attr-defined]  # lazy alias in 5.x

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(tokenizer_corpus() if corpus is None else corpus, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    bpe.save(str(directory / "tokenizer.json"))
    return Qwen2TokenizerFast(
        tokenizer_file=str(directory / "tokenizer.json"), unk_token=None, bos_token=None,
        eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE,
    )


def build_image_processor(min_pixels: int = 64 * 64, max_pixels: int = 128 * 128) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    # Qwen3-VL's real preprocessing; only the pixel budget is small (64x64 -> 4 image tokens)
    return Qwen2VLImageProcessorPil(
        patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
    )


def build_config(size_name: str | dict[str, int], tokenizer: Any, vision_size: dict[str, int] | None = None) -> Any:
    """`size_name` is a key of SIZES or a size dict of the same form; `vision_size` overrides VISION."""
    from transformers import Qwen3VLConfig

    size = SIZES[size_name] if isinstance(size_name, str) else size_name
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    quarter = size["head_dim"] // 2
    mrope = [quarter - 2 * (quarter // 3), quarter // 3, quarter // 3]  # sums to head_dim / 2
    text = {
        "vocab_size": len(tokenizer), "hidden_size": size["hidden"], "intermediate_size": size["ffn"],
        "num_hidden_layers": size["layers"], "num_attention_heads": size["heads"],
        "num_key_value_heads": size["kv_heads"], "head_dim": size["head_dim"], "hidden_act": "silu",
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "attention_bias": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": mrope,
                            "mrope_interleaved": True},
        "tie_word_embeddings": True, "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": None, "eos_token_id": ids["<|im_end|>"],
    }
    vision = dict(vision_size or VISION, patch_size=16, temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
                  out_hidden_size=size["hidden"], num_position_embeddings=256, deepstack_visual_indexes=[1],
                  hidden_act="gelu_pytorch_tanh")
    return Qwen3VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True,
    )


def build_model(name: str, directory: Path, tokenizer: Any, image_processor: Any, size: str | None = None,
                seed: int | None = None) -> None:
    """`size` (a key of SIZES, default `name`) and `seed` let tests build further models of the family."""
    import torch
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    config = build_config(size or name, tokenizer)
    torch.manual_seed(SIZES[size or name]["seed"] if seed is None else seed)
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32).eval()  # type: ignore[arg-type]
    answer_biased_init(model, tokenizer)
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, do_sample=False)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    image_processor.save_pretrained(directory)
    (directory / "mai_builtin.json").write_text(json.dumps({"name": name, "builder_version": BUILDER_VERSION}))


ANSWER_WORDS = ("yes", "no", " yes", " no", "A", "B", "C", "D", " A", " B", " C", " D")


def answer_biased_init(model: Any, tokenizer: Any, std: float = 0.7, answer_scale: float = 3.0) -> None:
    import torch

    answer_ids = sorted({i for word in ANSWER_WORDS for i in tokenizer(word).input_ids})
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, std)
        model.get_input_embeddings().weight[answer_ids] *= answer_scale


def is_current(directory: Path, builder: str = BUILDER_VERSION) -> bool:
    """Built by this version of the builder (an older build is rebuilt, never silently reused)."""
    marker = directory / "mai_builtin.json"
    return marker.exists() and json.loads(marker.read_text()).get("builder_version") == builder


def build_builtin_models(models_dir: Path, force: bool = False) -> list[Path]:
    """Build both tiny models (shared tokenizer and processor) unless they already exist."""
    targets = [models_dir / name for name in BUILTIN_NAMES]
    if not force and all(is_current(t) for t in targets):
        return targets
    tokenizer = build_tokenizer(models_dir / "_tokenizer")
    image_processor = build_image_processor()
    for name, target in zip(BUILTIN_NAMES, targets):
        build_model(name, target, tokenizer, image_processor)
    return targets


def build_variant(models_dir: Path, name: str, size: str, seed: int) -> Path:
    """Another model of the family (same tokenizer and processor), e.g. a second 'large' model."""
    from transformers import AutoImageProcessor, AutoTokenizer

    source = models_dir / SMALL_NAME
    tokenizer = AutoTokenizer.from_pretrained(source)
    build_model(name, models_dir / name, tokenizer, AutoImageProcessor.from_pretrained(source), size=size, seed=seed)
    return models_dir / name
