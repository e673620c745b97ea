"""The InternVL family (InternVLForConditionalGeneration, the InternVL3.5 -HF layout) through the transformers
backend: the built-in tiny InternVL checkpoint loaded through the real loading path runs every prompt kind of the
paper, prefix reuse is token-identical to a full prefill, attention capture equals eager attention."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from mai.backends.registry import clear_engines, get_engine
from mai.backends.tiny_internvl import TOKENS_PER_TILE
from mai.backends.transformers_backend import TransformersEngine
from mai.backends.transformers_capture import capture_inputs
from mai.config import INTERNVL_LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN, resolve_model
from mai.prompts import INSTRUCTIONS, RT_TEMPLATES, build_prompt, template_id
from mai.storage.paths import Home
from mai.types import REASONING_MARK, CaptureRequest, ChatPrompt, Decoding, GenRequest, GenResult
from tests.test_transformers_backend import requests as demo_requests

REASONING = "Let's think step by step. The image shows a blue square, so the answer is B. [[B]]"


def every_prompt(home: Path, decoding: Decoding) -> list[GenRequest]:
    """Each of the paper's prompts (S, E, R, S2 in both answer styles, RT prompt 1 and 2) for three demo samples of
    different image sizes' worth of question text."""
    base = demo_requests(home, decoding)[:3]
    kinds = [(kind, style, "rt_s2_style") for kind, style in INSTRUCTIONS] + [("RT", "letter", t) for t in RT_TEMPLATES]
    out = []
    for kind, style, rt in kinds:
        for i, request in enumerate(base):
            prompt = build_prompt(request.prompt.text, request.prompt.image_paths, kind, style, rt,  # type: ignore[arg-type]
                                  REASONING if kind in ("S2", "RT") else None)
            out.append(GenRequest(f"{template_id(kind, style, rt)}/{i}", f"s{i}", prompt, decoding))  # type: ignore[arg-type]
    return out


def test_internvl_tiny_checkpoint_runs_every_prompt_kind_through_the_real_loading_path(home: Path) -> None:
    directory = Home.at(home).models / INTERNVL_SMALL_BUILTIN
    files = {p.name for p in directory.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", "preprocessor_config.json",
            "processor_config.json"} <= files
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["InternVLForConditionalGeneration"] and config["model_type"] == "internvl"
    assert json.loads((directory / "processor_config.json").read_text())["processor_class"] == "InternVLProcessor"

    spec = resolve_model(INTERNVL_SMALL_BUILTIN, "main", "float32", Home.at(home).models)
    assert spec.local and spec.revision.startswith("sha256:")
    engine = get_engine(spec, "transformers")
    assert isinstance(engine, TransformersEngine)
    loaded = engine.load()
    assert loaded.family.name == "internvl"
    assert type(loaded.processor).__name__ in ("InternVLProcessor", "InternVLImageProcessorOnly")

    batch = every_prompt(home, Decoding(max_new_tokens=8))
    batched = engine.generate(batch, batch_size=len(batch))
    single = [engine.generate([r], batch_size=1)[0] for r in batch]
    assert [r.token_ids for r in batched] == [r.token_ids for r in single]  # fp32: padding changes nothing
    assert [r.prompt_tokens for r in batched] == [r.prompt_tokens for r in single]
    assert all(1 <= r.output_tokens <= 8 for r in batched)
    assert len({r.text for r in batched}) > 3  # outputs depend on the prompt

    # the image is InternVL's token layout: <img>, 4 tiles + thumbnail of TOKENS_PER_TILE <IMG_CONTEXT>, </img>
    encoded = loaded.processor(text=[loaded.processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q?"}]}], tokenize=False,
        add_generation_prompt=True)], images=[[_image(batch[0])]], return_tensors="pt")
    tokens = loaded.tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    start, end = tokens.index("<img>"), tokens.index("</img>")
    assert tokens[start + 1:end] == ["<IMG_CONTEXT>"] * (5 * TOKENS_PER_TILE)
    assert encoded["pixel_values"].shape[0] == 5
    assert loaded.tokenizer.decode(encoded["input_ids"][0][end + 1:]) == "\nQ?<|im_end|>\n<|im_start|>assistant\n"


def _image(request: GenRequest) -> object:
    from PIL import Image

    return Image.open(request.prompt.image_paths[0]).convert("RGB")


def _prefix_outputs(home: Path, reuse: bool) -> dict[str, GenResult]:
    """S for four samples, E for a fifth (its prefill in between), then R, S2 and RT continuing from those prefixes,
    in batches that mix rows of different prefixes and prompt lengths."""
    clear_engines()
    spec = resolve_model(INTERNVL_LARGE_BUILTIN, "main", "float32", Home.at(home).models)
    engine = get_engine(spec, "transformers")
    if not reuse:
        engine.prefixes.max_bytes = 0  # type: ignore[attr-defined]
    decoding = Decoding(max_new_tokens=12)
    base = demo_requests(home, decoding)

    def kind(k: str, rows: list[GenRequest], upstream: str | None = None, rt: str = "rt_reference") -> list[GenRequest]:
        return [GenRequest(f"{k}{i}", r.sample_id, build_prompt(r.prompt.text, r.prompt.image_paths, k, "letter",  # type: ignore[arg-type]
                                                              rt, upstream and upstream * (i + 1)), decoding)
                for i, r in enumerate(rows)]

    results = engine.generate(kind("S", base[:4]), 4)
    results += engine.generate(kind("E", base[4:]), 1)
    results += engine.generate(kind("R", base[:4]), 2)
    results += engine.generate(kind("S2", base, REASONING), 5)
    results += engine.generate(kind("RT", base, REASONING), 3)
    return {r.gen_id: r for r in results}


def test_internvl_prefix_reuse_gives_the_tokens_of_a_full_prefill(home: Path) -> None:
    reused, full = _prefix_outputs(home, reuse=True), _prefix_outputs(home, reuse=False)
    assert {g: r.token_ids for g, r in reused.items()} == {g: r.token_ids for g, r in full.items()}
    assert {g: r.prompt_tokens for g, r in reused.items()} == {g: r.prompt_tokens for g, r in full.items()}
    continued = {g for g, r in reused.items() if r.cached_prompt_tokens}
    # R after S, S2 and RT after S or E: continued past the image tokens
    assert continued == {f"R{i}" for i in range(4)} | {f"S2{i}" for i in range(5)} | {f"RT{i}" for i in range(5)}
    assert all(reused[g].cached_prompt_tokens > 5 * TOKENS_PER_TILE for g in continued)  # type: ignore[operator]
    assert not any(r.cached_prompt_tokens for r in full.values())


def test_internvl_attention_capture_equals_eager_attention(home: Path) -> None:
    """Layer L is the L-th decoder layer of the language model (0-based); the capture of every layer equals the
    last row of eager attention over the reasoning span, on a left-padded batch."""
    from transformers import AutoModelForImageTextToText

    spec = resolve_model(INTERNVL_LARGE_BUILTIN, "main", "float32", Home.at(home).models)
    engine = get_engine(spec, "transformers")
    assert engine.num_layers() == 4
    base = demo_requests(home, Decoding(8))
    captures = [CaptureRequest(f"c{i}", r.sample_id,
                               ChatPrompt(r.prompt.text + f"\nReference: {REASONING_MARK}\nAnswer.", r.prompt.image_paths),
                               tuple(engine.encode(" step" * (2 + 3 * i) + " so B")))
                for i, r in enumerate(base[:3])]
    layers = set(range(engine.num_layers()))
    batched = {(c.capture_id, c.layer): c for c in engine.capture(captures, layers, batch_size=3)}
    eager = AutoModelForImageTextToText.from_pretrained(spec.name_or_path, dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    loaded = engine.load()
    for request in captures:
        inputs, [(begin, end)] = capture_inputs([request], loaded, "cpu")
        assert "pixel_values" in inputs
        with torch.no_grad():
            reference = eager(**inputs, output_attentions=True).attentions
        assert len(reference) == engine.num_layers()
        for layer in layers:
            expected = reference[layer][0, :, -1, begin:end]
            got = batched[(request.capture_id, layer)]
            assert len(got.weights) == end - begin == len(request.reasoning_ids)
            assert torch.allclose(torch.tensor(got.weights), expected.mean(dim=0), atol=1e-5)


def build_tiny_llava(directory: Path) -> Path:
    """A LLaVA-architecture checkpoint (CLIP vision tower, Qwen2 language model, random weights): a family that is
    neither Qwen-VL nor InternVL, with its own processor, image token and chat template."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    from mai.backends.tiny_models import build_tokenizer

    base = build_tokenizer(directory / "tokenizer")
    base.add_special_tokens({"additional_special_tokens": ["<image>"]})
    template = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
                "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '<image>\\n' }}"
                "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{{ '<|im_end|>\\n' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    tokenizer = type(base)(tokenizer_object=base._tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                           bos_token=None, extra_special_tokens={"image_token": "<image>"}, chat_template=template)
    processor = LlavaProcessor(image_processor=LlavaImageProcessorPil(size={"shortest_edge": 32},
                                                                      crop_size={"height": 32, "width": 32}),
                               tokenizer=tokenizer, patch_size=8, vision_feature_select_strategy="full",
                               num_additional_image_tokens=1, chat_template=template)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        text_config={"model_type": "qwen2", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "pad_token_id": tokenizer.pad_token_id, "eos_token_id": eos},
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="full",
        vision_feature_layer=-1, projector_hidden_act="gelu")
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tokenizer.pad_token_id, eos
    checkpoint = directory / "tiny-llava"
    model.save_pretrained(checkpoint)
    processor.save_pretrained(checkpoint)
    return checkpoint


def test_an_untested_family_beside_internvl_runs_through_the_auto_classes_with_a_warning(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    checkpoint = build_tiny_llava(tmp_path)
    spec = resolve_model(str(checkpoint), "main", "float32", Home.at(home).models)
    engine = get_engine(spec, "transformers")
    batch = demo_requests(home, Decoding(max_new_tokens=6))
    with caplog.at_level(logging.WARNING, logger="mai"):
        batched = engine.generate(batch, batch_size=len(batch))
    assert engine.load().family.name == "untested"  # type: ignore[attr-defined]
    assert any("untested family" in r.getMessage() and "'llava'" in r.getMessage() for r in caplog.records)
    single = [engine.generate([r], batch_size=1)[0] for r in batch]
    assert [r.token_ids for r in batched] == [r.token_ids for r in single]
    assert all(r.prompt_tokens > 17 for r in batched)  # 16 patches + CLS per image, then the text
    assert not any(r.cached_prompt_tokens for r in single)  # prefix reuse is off for an untested family


def test_an_original_internvl_chat_checkpoint_is_refused_before_anything_loads(tmp_path: Path) -> None:
    """InternVL's original repositories (custom code, model_type internvl_chat) fail at validation with the fix."""
    from mai.errors import ConfigError

    original = tmp_path / "InternVL3_5-1B"
    original.mkdir()
    (original / "config.json").write_text(json.dumps({"model_type": "internvl_chat",
                                                      "architectures": ["InternVLChatModel"]}))
    with pytest.raises(ConfigError, match="-HF"):
        resolve_model(str(original), "main", "float32", tmp_path)


def test_internvl_latency_profile_counts_its_tiles_image_tokens(home: Path) -> None:
    """`mai profile` on an InternVL model: the vision encoder is timed on its own, and a 64 px image is 4 tiles and a
    thumbnail of TOKENS_PER_TILE tokens each; the generation is forced to the asked length."""
    spec = resolve_model(INTERNVL_LARGE_BUILTIN, "main", "float32", Home.at(home).models)
    point = get_engine(spec, "transformers").profile(resolution=64, query_tokens=16, output_tokens=4,  # type: ignore[attr-defined]
                                                     repeats=1)
    assert point.image_tokens == 5 * TOKENS_PER_TILE
    assert point.output_tokens == 4 and point.input_tokens > point.image_tokens + 16
    assert all(t > 0 for t in (*point.timings.vision, *point.timings.ttft, *point.timings.preprocess))
