"""Chat text + images -> model inputs for Qwen-VL-style models.

transformers' stock `Qwen3VLProcessor` cannot be built without torchvision (its video processor needs
it), and PyPI has no CPU build of torchvision. The stock processor is used when it loads (GPU machines);
otherwise this image-only equivalent does the same for images: the tokenizer's chat template, the
model's image processor (PIL backend), one `<|image_pad|>` per merged patch, and `mm_token_type_ids`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from torch import Tensor

IMAGE_TOKEN = "<|image_pad|>"

# Processed images kept per process. A sample's image is processed once for all of a model's stages and for both
# models of a pair when their image processors are configured alike (the two MV1 stages run on the same images at
# the same time, R/S2 and RT come back to them). Pixel patches are large for real images (a 1 MP image at patch
# 16 is ~4k patches x 1536 floats, 24 MiB), so the cache is bounded in bytes and forgets the least recently used.
# MAI_IMAGE_CACHE_MB=0 turns it off (each batch's images are processed together, as the processor does).
IMAGE_CACHE_BYTES = int(os.environ.get("MAI_IMAGE_CACHE_MB", "1024")) << 20


class ProcessedImages:
    """(image file, image processor configuration) -> (pixel patches, grid_thw row), least recently used out."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[str, int, int, str], tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every processed image (`mai time` starts each run it re-times as a fresh process would)."""
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def get(self, path: str, processor_key: str, image_processor: Any) -> tuple[Any, Any]:
        key = (*image_file_key(path), processor_key)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return found
        value = _process_image(path, image_processor)
        with self._lock:
            self.misses += 1
            if key not in self._items:
                self._items[key] = value
                self.bytes += _nbytes(value)
            while self.bytes > self.max_bytes and self._items:
                _, dropped = self._items.popitem(last=False)
                self.bytes -= _nbytes(dropped)
        return value


def image_file_key(path: str) -> tuple[str, int, int]:
    """An image file as caches know it: a file rewritten in place (new mtime or size) is another image."""
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_mtime_ns, stat.st_size


def _process_image(path: str, image_processor: Any) -> tuple[Any, Any]:
    from PIL import Image

    with Image.open(path) as image:
        vision = image_processor(images=[image.convert("RGB")], return_tensors="pt")
    return vision["pixel_values"], vision["image_grid_thw"]


def _nbytes(value: tuple[Any, Any]) -> int:
    return int(sum(t.element_size() * t.nelement() for t in value))


PROCESSED_IMAGES = ProcessedImages(IMAGE_CACHE_BYTES)


class ImagePart(TypedDict):
    type: Literal["image"]


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class UserTurn(TypedDict):
    """One chat message as chat templates read it: images first, then the text."""

    role: Literal["user"]
    content: list[ImagePart | TextPart]


class VisionInputs(TypedDict):
    """The image tensors of a batch: every image's patches, concatenated, and each image's patch grid."""

    pixel_values: Tensor
    image_grid_thw: Tensor


class ImageOnlyProcessor:
    def __init__(self, tokenizer: Any, image_processor: Any) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        # two processors configured alike share their processed images
        self.image_processor_key = hashlib.sha256(image_processor.to_json_string().encode()).hexdigest()

    def apply_chat_template(self, messages: list[UserTurn], **kwargs: Any) -> str:
        text: str = self.tokenizer.apply_chat_template(messages, **kwargs)
        return text

    def __call__(self, text: list[str], images: list[list[Any]] | None = None, **kwargs: Any) -> Any:
        flat_images = [image for group in (images or []) for image in group]
        vision: VisionInputs | None = None
        if flat_images:
            processed = self.image_processor(images=flat_images, return_tensors="pt")
            vision = {"pixel_values": processed["pixel_values"], "image_grid_thw": processed["image_grid_thw"]}
        return self._with_text(text, vision)

    def from_files(self, text: list[str], image_paths: list[tuple[str, ...]]) -> Any:
        """As calling it with the images opened from `image_paths`, each image processed once per process
        (PROCESSED_IMAGES): the image processor handles images one by one, so the concatenation is the same."""
        import torch

        processed = [PROCESSED_IMAGES.get(path, self.image_processor_key, self.image_processor)
                     for group in image_paths for path in group]
        vision: VisionInputs | None = None
        if processed:
            vision = {"pixel_values": torch.cat([pixels for pixels, _ in processed]),
                      "image_grid_thw": torch.cat([grid for _, grid in processed])}
        return self._with_text(text, vision)

    def _with_text(self, text: list[str], vision: VisionInputs | None) -> Any:
        import torch

        if vision is not None:
            text = self._expand_image_tokens(text, vision["image_grid_thw"])
        encoded = self.tokenizer(text, return_tensors="pt", padding=True)
        encoded["mm_token_type_ids"] = (encoded["input_ids"] == self.image_token_id).to(torch.int32)
        if vision is not None:
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
                if count is None:  # the loader neutralises the token in benchmark text (mai/evals/loading.py)
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
