"""Chat prompts -> model inputs for the transformers backend: one user turn, images first, then the text (the layout
every prompt kind shares, so that image + question form a common prefix)."""

from __future__ import annotations

from typing import Any

from mai.backends.processor import PROCESSED_IMAGES, ImageOnlyProcessor, ImagePart, TextPart, UserTurn
from mai.types import ChatPrompt, GenRequest


def user_turn(prompt: ChatPrompt) -> UserTurn:
    content: list[ImagePart | TextPart] = [{"type": "image"} for _ in prompt.image_paths]
    content.append({"type": "text", "text": prompt.text})
    return {"role": "user", "content": content}


def chat_text(processor: Any, prompt: ChatPrompt) -> str:
    """The prompt rendered by the model's chat template, ready for the assistant's answer."""
    text: str = processor.apply_chat_template([user_turn(prompt)], tokenize=False, add_generation_prompt=True)
    return text


def encode_prompts(batch: list[GenRequest], processor: Any, device: Any) -> Any:
    """Chat texts and images -> model inputs (left-padded). With the image-only processor each image is processed
    once per process, whichever stage or model asks again (mai.backends.processor.PROCESSED_IMAGES)."""
    from PIL import Image

    texts = [chat_text(processor, request.prompt) for request in batch]
    if isinstance(processor, ImageOnlyProcessor) and PROCESSED_IMAGES.max_bytes > 0:
        return processor.from_files(texts, [r.prompt.image_paths for r in batch]).to(device)
    images = [[Image.open(p).convert("RGB") for p in r.prompt.image_paths] for r in batch]
    encoded = processor(text=texts, images=images if any(images) else None, return_tensors="pt", padding=True)
    return encoded.to(device)
