"""Counting a prompt's tokens as a model will read them, without running the model: the tokens of its chat text
plus, for each image, the tokens the model's processor expands it to (from the image's size, read from its header;
no pixel is processed). The prompt-length check (mai/run/prompt_limits.py) refuses a sample whose prompt would not
fit before any model sees it: a megabyte question built a ~1 M-token prompt whose attention mask alone needed a
terabyte, which killed the whole run.

The count is the processor's for both backends: vLLM expands images with the same Hugging Face processor
(tests/test_hardening_prompt_length.py checks the count against the processor's own encoding, for both families).
A text far longer than any limit (and longer than `UNTOKENIZED_CHARS`) is refused from its length alone, before it is
templated or tokenized: no token covers more characters than the longest entry of the vocabulary, so a text of n
characters has at least n / longest tokens. A shorter text is always counted exactly, so that a refusal gives the
prompt's size.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from mai.backends.model_family import PromptSizing, context_length
from mai.types import ChatPrompt, ModelSpec

# a text longer than this that its length alone puts over the limit is not tokenized (tokenizing a megabyte takes
# seconds); below it, tokenizing takes milliseconds
UNTOKENIZED_CHARS = 100_000


@dataclass(frozen=True)
class PromptSize:
    """A prompt's tokens; `exact` False: a lower bound from its length (a text too long to be worth tokenizing)."""

    tokens: int
    exact: bool = True


class PromptCounter:
    """A model's tokenizer and processor, loaded without its weights, and its context length."""

    def __init__(self, model: ModelSpec) -> None:
        from transformers import AutoConfig, AutoTokenizer

        from mai.backends.transformers_loading import family_of

        revision = None if model.local else model.revision
        config = AutoConfig.from_pretrained(model.name_or_path, revision=revision)
        self.context_length = context_length(config)
        self.family = family_of(config)
        self.tokenizer = AutoTokenizer.from_pretrained(model.name_or_path, revision=revision, padding_side="left")
        self.processor = self.family.load_processor(model.name_or_path, revision, self.tokenizer)
        # byte-level BPE vocabularies spell a token's bytes one character each, so no token decodes to more
        # characters than its entry has
        self.longest_token = max(len(entry) for entry in self.tokenizer.get_vocab())

    def count(self, prompt: ChatPrompt, limit: int) -> PromptSize:
        """The prompt's tokens; where its text is longer than `UNTOKENIZED_CHARS` and alone surely has more than
        `limit`, that lower bound instead."""
        at_least = -(-len(prompt.text) // self.longest_token)
        if at_least > limit and len(prompt.text) > UNTOKENIZED_CHARS:
            return PromptSize(at_least, exact=False)
        from mai.backends.transformers_inputs import chat_text

        text = chat_text(self.processor, prompt)
        if prompt.image_paths and not isinstance(self.family, PromptSizing):
            return PromptSize(self._by_processor(text, prompt.image_paths))
        tokens = len(self.tokenizer(text)["input_ids"])
        for path in prompt.image_paths:  # each image's one placeholder token becomes its expansion
            tokens += self._image_tokens(path) - 1
        return PromptSize(tokens)

    def _image_tokens(self, path: str) -> int:
        from PIL import Image

        assert isinstance(self.family, PromptSizing)
        with Image.open(path) as image:
            width, height = image.size
        return self.family.image_tokens_for_size(self.processor, height, width)

    def _by_processor(self, text: str, image_paths: tuple[str, ...]) -> int:
        """A family with no size arithmetic (an untested one): the processor's own encoding, images processed."""
        from PIL import Image

        images = [Image.open(path).convert("RGB") for path in image_paths]
        encoded: Any = self.processor(text=[text], images=[images], return_tensors="pt")
        return int(encoded["input_ids"].shape[1])


@functools.cache
def prompt_counter(model: ModelSpec) -> PromptCounter:
    """One counter per model and process (a tokenizer and processor load takes about a second)."""
    return PromptCounter(model)
