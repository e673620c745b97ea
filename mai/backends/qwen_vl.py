"""The Qwen-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) as the transformers backend sees it (mai/backends/model_family.py).

- An image becomes one `<|image_pad|>` token per merged patch; the processor marks them in `mm_token_type_ids`,
  and the images travel as `pixel_values` with their patch grids in `image_grid_thw`.
- Positions are M-RoPE: after its images a prompt's positions differ from its token indices by an offset that the
  model keeps as mutable state (`model.rope_deltas`), set by each prefill. A continuation from a cached prefix must
  restore that prefix's offset right before it runs (an offset left by another request made the continuation
  wrong); the engine holds its lock from the restore through the generate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mai.backends.model_family import ModelInputs
from mai.backends.processor import IMAGE_TOKEN, load_processor

if TYPE_CHECKING:
    from torch import Tensor

VISION_INPUTS = ("pixel_values", "image_grid_thw")


class QwenVL:
    name = "qwen-vl"

    def matches(self, config: Any) -> bool:
        return str(getattr(config, "model_type", "")).startswith("qwen")

    def load_processor(self, path: str, revision: str | None, tokenizer: Any) -> Any:
        return load_processor(path, revision, tokenizer)

    def continues_prefixes(self, network: Any, inputs: ModelInputs) -> bool:
        return hasattr(getattr(network, "model", None), "rope_deltas") and "mm_token_type_ids" in inputs

    def text_after_images(self, network: Any, inputs: ModelInputs, row: int) -> int:
        real = inputs["attention_mask"][row].bool()
        vision = inputs["mm_token_type_ids"][row][real].nonzero()
        return int(vision[-1]) + 1 if len(vision) else 0

    def position_offsets(self, network: Any, rows: int) -> list[int]:
        return [int(delta) for delta in network.model.rope_deltas.view(-1).tolist()]

    def restore_position_offsets(self, network: Any, offsets: list[int]) -> None:
        import torch

        network.model.rope_deltas = torch.tensor([[offset] for offset in offsets], device=network.device)

    def with_image_marks(self, input_ids: Tensor, attention_mask: Tensor, encoded: ModelInputs, tokenizer: Any
                         ) -> dict[str, Tensor]:
        import torch

        image_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
                  "mm_token_type_ids": (input_ids == image_id).to(torch.int32)}
        inputs.update({name: tensor for name, tensor in encoded.items() if name in VISION_INPUTS})
        return inputs

    def image_features(self, network: Any, inputs: ModelInputs) -> Any:
        visual = getattr(network, "model", network)
        return visual.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])

    def image_tokens(self, processor: Any, inputs: ModelInputs) -> int:
        merge = int(getattr(processor.image_processor, "merge_size", 2)) ** 2
        return int(inputs["image_grid_thw"][0].prod()) // merge

    def image_tokens_for_size(self, processor: Any, height: int, width: int) -> int:
        """One `<|image_pad|>` per merged patch of the resized image (the image processor's own arithmetic, which
        vLLM uses too); `<|vision_start|>` / `<|vision_end|>` are in the chat text already."""
        image_processor = processor.image_processor
        patches = int(image_processor.get_number_of_image_patches(height, width, {}))
        return patches // int(getattr(image_processor, "merge_size", 2)) ** 2


QWEN_VL = QwenVL()
