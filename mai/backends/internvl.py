"""The InternVL family (InternVL3 / InternVL3.5 in the Hugging Face format, `InternVLForConditionalGeneration`) as
the transformers backend sees it (mai/backends/model_family.py).

- An image becomes `<img>`, then `image_seq_length` `<IMG_CONTEXT>` tokens per tile, then `</img>`: dynamic
  high-resolution tiling cuts the image into up to `max_patches` tiles of the vision tower's input size (plus a
  thumbnail when there is more than one), each tile's features pixel-shuffled to `image_seq_length` tokens. The
  images travel as `pixel_values` (one row per tile); the tokens are marked by `config.image_token_id`.
- The language model (Qwen3 for InternVL3.5 up to 14B) uses plain 1-D RoPE: a token's position is its index among
  the row's real tokens, which generate derives from the attention mask. There is no position state kept in the
  model, so a continuation from a cached prefix needs no offset restored (the offsets are all 0), and the prefix
  cache's left-padding-and-gap layout (transformers_prefix.py) gives every token the position a full prefill does.
- Attention capture runs on the language model's decoder layers: layer index L is the L-th of
  `text_config.num_hidden_layers` decoder layers (0-based), as for Qwen-VL; the vision tower (InternViT) is not
  captured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mai.backends.model_family import ModelInputs

if TYPE_CHECKING:
    from torch import Tensor

VISION_INPUTS = ("pixel_values",)


class InternVL:
    name = "internvl"

    def matches(self, config: Any) -> bool:
        return str(getattr(config, "model_type", "")) == "internvl"

    def load_processor(self, path: str, revision: str | None, tokenizer: Any) -> Any:
        from mai.backends.internvl_processor import load_internvl_processor

        return load_internvl_processor(path, revision)

    def continues_prefixes(self, network: Any, inputs: ModelInputs) -> bool:
        text = network.config.get_text_config()
        rope = getattr(text, "rope_parameters", None) or {}
        return "input_ids" in inputs and "mrope_section" not in rope  # 1-D positions (every InternVL3.5 LLM)

    def text_after_images(self, network: Any, inputs: ModelInputs, row: int) -> int:
        real = inputs["attention_mask"][row].bool()
        vision = (inputs["input_ids"][row][real] == int(network.config.image_token_id)).nonzero()
        return int(vision[-1]) + 1 if len(vision) else 0

    def position_offsets(self, network: Any, rows: int) -> list[int]:
        return [0] * rows

    def restore_position_offsets(self, network: Any, offsets: list[int]) -> None:
        return None  # positions follow from the attention mask: nothing kept between calls

    def with_image_marks(self, input_ids: Tensor, attention_mask: Tensor, encoded: ModelInputs, tokenizer: Any
                         ) -> dict[str, Tensor]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        inputs.update({name: tensor for name, tensor in encoded.items() if name in VISION_INPUTS})
        return inputs

    def image_features(self, network: Any, inputs: ModelInputs) -> Any:
        return network.model.get_image_features(pixel_values=inputs["pixel_values"])

    def image_tokens(self, processor: Any, inputs: ModelInputs) -> int:
        return int((inputs["input_ids"][0] == int(processor.image_token_id)).sum())

    def image_tokens_for_size(self, processor: Any, height: int, width: int) -> int:
        """`<img>` + `image_seq_length` `<IMG_CONTEXT>` per tile + `</img>`, the tiles as the dynamic tiling cuts an
        image of this size (the processor's own count, which vLLM uses too)."""
        counted = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])
        return int(counted.num_image_tokens[0])


INTERNVL = InternVL()
