"""InternVL's own processor without its video half.

transformers' `InternVLProcessor` builds a video processor that needs torchvision, which has no CPU build on PyPI
(NOTES.md), so `AutoProcessor` fails on a CPU-only machine even for images. This subclass is the stock processor
with the video processor left out: the same chat template, the same dynamic high-resolution tiles (the checkpoint's
`GotOcr2ImageProcessor` settings: tile size, min/max tiles, thumbnail) and the same image-token layout
(`<img>` + `<IMG_CONTEXT>` x image_seq_length per tile + `</img>`), so the token ids are the stock processor's.
Imported only where a model is loaded (it imports transformers).
"""

from __future__ import annotations

from typing import Any

from transformers import InternVLProcessor


class InternVLImageProcessorOnly(InternVLProcessor):
    def __init__(self, image_processor: Any = None, tokenizer: Any = None, image_seq_length: int = 256,
                 chat_template: Any = None, **kwargs: Any) -> None:
        # the attributes a ProcessorMixin saves and loads are read from this signature: no video_processor
        super().__init__(image_processor, tokenizer, None, image_seq_length=image_seq_length,
                         chat_template=chat_template, **kwargs)


def load_internvl_processor(path: str, revision: str | None) -> Any:
    """The stock processor where it can be built (torchvision present: GPU machines, the vLLM environment); the
    image-only one otherwise, from the same files."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(path, revision=revision)
    except (ImportError, ValueError):  # "requires `torchvision` to be installed"
        processor = InternVLImageProcessorOnly.from_pretrained(path, revision=revision or "main")
    processor.tokenizer.padding_side = "left"
    return processor
