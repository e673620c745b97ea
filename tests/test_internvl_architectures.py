"""Real-size InternVL3.5 architectures with random weights (`random:internvl3.5-1b` ... `-14b`): the shapes give
the model cards' parameter counts, the names resolve without files, and a model of the family is built on the meta
device with InternVL's real preprocessing (448 px tiles, 256 tokens per tile)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mai.backends.architectures import known_architectures
from mai.backends.architectures_internvl import INTERNVL_SHAPES, TOKENS_PER_TILE, internvl_architecture_config
from mai.backends.tiny_internvl import build_internvl_tokenizer
from mai.config import resolve_model
from mai.errors import ConfigError

# total parameters as the InternVL3.5 model cards state them (vision 0.3B + language model; tied embeddings
# counted twice, as the cards count them)
CARD_BILLIONS = {"internvl3.5-1b": 1.1, "internvl3.5-2b": 2.3, "internvl3.5-4b": 4.7, "internvl3.5-8b": 8.5,
                 "internvl3.5-14b": 15.1}


@pytest.mark.parametrize("name", list(INTERNVL_SHAPES))
def test_internvl_parameter_counts_match_the_model_cards(tmp_path: Path, name: str) -> None:
    from transformers import InternVLForConditionalGeneration

    config = internvl_architecture_config(name, build_internvl_tokenizer(tmp_path / "tok"))
    with torch.device("meta"):  # shapes only: no memory is allocated
        model = InternVLForConditionalGeneration(config)
    total = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))  # tied: counted twice
    assert total / 1e9 == pytest.approx(CARD_BILLIONS[name], rel=0.05)
    vision = sum(p.numel() for p in model.model.vision_tower.parameters())
    assert vision / 1e9 == pytest.approx(0.3, rel=0.05)  # InternViT-300M
    assert config.image_seq_length == TOKENS_PER_TILE == 256


def test_internvl_random_architecture_names_resolve_without_files(tmp_path: Path) -> None:
    assert {f"internvl3.5-{size}" for size in ("1b", "2b", "4b", "8b", "14b")} <= set(known_architectures())
    spec = resolve_model("random:internvl3.5-2b", "main", "bfloat16", tmp_path)
    assert spec.name_or_path == "random:internvl3.5-2b" and not spec.local
    with pytest.raises(ConfigError, match="unknown architecture"):
        resolve_model("random:internvl3.5-38b", "main", "bfloat16", tmp_path)
