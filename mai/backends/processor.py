"""Chat text + images -> model inputs for Qwen-VL-style models.

transformers' stock `Qwen3VLProcessor` cannot be built without torchvision (its video processor needs
it), and PyPI has no CPU build of torchvision. The stock processor is used when it loads (GPU machines);
otherwise this image-only equivalent does the same for images: the tokenizer's chat template, the
model's image processor (PIL backend), one `<|image_pad|>` per merged patch, and `mm_token_type_ids`.
"""

from __future__ import annotations

from typing import Any

IMAGE_TOKEN = "<|image_pad|>"


class ImageOnlyProcessor:
    def __init__(self, tokenizer: Any, image_processor: Any) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        text: str = self.tokenizer.apply_chat_template(messages, **kwargs)
        return text

    def __call__(self, text: list[str], images: list[list[Any]] | None = None, **kwargs: Any) -> Any:
        import torch

        flat_images = [image for group in (images or []) for image in group]
        vision: dict[str, Any] = {}
        if flat_images:
            vision = dict(self.image_processor(images=flat_images, return_tensors="pt"))
            text = self._expand_image_tokens(text, vision["image_grid_thw"])
        encoded = self.tokenizer(text, return_tensors="pt", padding=True)
        encoded["mm_token_type_ids"] = (encoded["input_ids"] == self.image_token_id).to(torch.int32)
        encoded.update(vision)
        return encoded

    def _expand_image_tokens(self, texts: list[str], grid_thw: Any) -> list[str]:
        merge = int(self.image_processor.merge_size) ** 2
        counts = iter(int(row.prod()) // merge for row in grid_thw)
        expanded = []
        for text in texts:
            pieces = text.split(IMAGE_TOKEN)
            out = [pieces[0]]
            for piece in pieces[1:]:
                count = next(counts, None)
                if count is None:  # the loader neutralises the token in benchmark text (benchmarks/loading.py)
                    raise ValueError(f"the prompts hold more {IMAGE_TOKEN} markers than there are images")
                out.append(IMAGE_TOKEN * count + piece)
            expanded.append("".join(out))
        return expanded


def load_processor(path: str, revision: str | None, tokenizer: Any) -> Any:
    """The stock processor when it can be built; the image-only equivalent otherwise."""
    from transformers import AutoImageProcessor, AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(path, revision=revision)
        processor.tokenizer.padding_side = "left"
        return processor
    except (ImportError, AttributeError, ValueError, OSError):
        image_processor = AutoImageProcessor.from_pretrained(path, revision=revision)
        return ImageOnlyProcessor(tokenizer, image_processor)
