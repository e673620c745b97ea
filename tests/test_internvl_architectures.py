"""Real-size InternVL3.5 architectures with random weights (`random:internvl3.5-1b` ... `-14b`): the shapes give
the model cards' parameter counts (an untied output head at every size, as the checkpoints store it), the names
resolve without files, and a model of the family is built on the meta device with InternVL's real preprocessing
(448 px tiles, 256 tokens per tile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from mai.backends.architectures import known_architectures
from mai.backends.architectures_internvl import INTERNVL_SHAPES, TOKENS_PER_TILE, internvl_architecture_config
from mai.backends.tiny_internvl import build_internvl_tokenizer
from mai.config import resolve_model
from mai.errors import ConfigError

# (language model, total) in billions, as the InternVL3.5 model cards' table gives them (vision part 0.3B at every
# size). Every size keeps a separate output head: tied, the 1B-4B would read 0.6 / 1.7 / 4.0B of language model.
CARD_BILLIONS = {"internvl3.5-1b": (0.8, 1.1), "internvl3.5-2b": (2.0, 2.3), "internvl3.5-4b": (4.4, 4.7),
                 "internvl3.5-8b": (8.2, 8.5), "internvl3.5-14b": (14.8, 15.1)}
# the tensors stored in the OpenGVLab/InternVL3_5-1B checkpoint (as counted on its model card and by issue 41):
# 751,632,384 language parameters (Qwen3-0.6B's 596,049,920 plus a 151936 x 1024 output head) and 309.3M in
# the vision tower and projector, 1.061B in all
INTERNVL_1B_LANGUAGE = 751_632_384


def _meta_model(tmp_path: Path, name: str) -> Any:
    from transformers import InternVLForConditionalGeneration

    config = internvl_architecture_config(name, build_internvl_tokenizer(tmp_path / "tok"))
    with torch.device("meta"):  # shapes only: no memory is allocated
        return InternVLForConditionalGeneration(config)


def _unique_parameters(module: Any) -> int:
    return sum({id(p): p.numel() for p in module.parameters()}.values())


@pytest.mark.parametrize("name", list(INTERNVL_SHAPES))
def test_internvl_parameter_counts_match_the_model_cards(tmp_path: Path, name: str) -> None:
    model = _meta_model(tmp_path, name)
    language = _unique_parameters(model.model.language_model) + model.lm_head.weight.numel()
    assert model.lm_head.weight is not model.model.language_model.embed_tokens.weight  # untied, as stored
    card_language, card_total = CARD_BILLIONS[name]
    assert round(language / 1e9, 1) == card_language
    assert round(_unique_parameters(model) / 1e9, 1) == card_total
    vision = _unique_parameters(model.model.vision_tower)
    assert vision / 1e9 == pytest.approx(0.3, rel=0.05)  # InternViT-300M
    assert model.config.image_seq_length == TOKENS_PER_TILE == 256


def test_internvl_1b_has_the_stored_checkpoint_parameter_counts(tmp_path: Path) -> None:
    model = _meta_model(tmp_path, "internvl3.5-1b")
    language = _unique_parameters(model.model.language_model) + model.lm_head.weight.numel()
    assert language == INTERNVL_1B_LANGUAGE
    vision_and_projector = _unique_parameters(model.model.vision_tower) + _unique_parameters(
        model.model.multi_modal_projector)
    assert round(vision_and_projector / 1e6, 1) == 309.3
    assert round(_unique_parameters(model) / 1e9, 3) == 1.061


def test_internvl_random_architecture_names_resolve_without_files(tmp_path: Path) -> None:
    assert {f"internvl3.5-{size}" for size in ("1b", "2b", "4b", "8b", "14b")} <= set(known_architectures())
    spec = resolve_model("random:internvl3.5-2b", "main", "bfloat16", tmp_path)
    assert spec.name_or_path == "random:internvl3.5-2b" and not spec.local
    with pytest.raises(ConfigError, match="unknown architecture"):
        resolve_model("random:internvl3.5-38b", "main", "bfloat16", tmp_path)
