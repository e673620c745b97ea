"""What the transformers backend needs to know of a model family beyond transformers' common API.

Generation, batching, prefix reuse, attention capture and profiling are written once (transformers_*.py); where a
family differs (how image tokens are marked, how positions continue after a cached prefix, which tensors carry the
images) they ask the model's `ModelFamily`. A new family is one module implementing this protocol plus one entry
in `FAMILIES` (mai/backends/transformers_loading.py), where a loaded model gets its family.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import Tensor

# Model inputs as the network's forward and generate take them: input name -> tensor.
ModelInputs = Mapping[str, "Tensor"]


class ModelFamily(Protocol):
    name: str

    def matches(self, config: Any) -> bool:
        """Whether a model of this transformers config (a checkpoint's, read before its weights) belongs here."""
        ...

    def load_processor(self, path: str, revision: str | None, tokenizer: Any) -> Any:
        """The checkpoint's processor: the stock one where it can be built, else an image-only equivalent (the
        stock processors of both families need torchvision for their video half, which has no CPU build)."""
        ...

    def continues_prefixes(self, network: Any, inputs: ModelInputs) -> bool:
        """Whether a prompt of these inputs can continue from a cached prefix (mai/backends/prefix_kv.py): the
        family's position bookkeeping is implemented for it, and the inputs mark the image tokens."""
        ...

    def text_after_images(self, network: Any, inputs: ModelInputs, row: int) -> int:
        """Index, among the row's real (unpadded) tokens, of the first token after its last image token (0: no
        image): a cached prefix is reused only if it reaches past the images."""
        ...

    def position_offsets(self, network: Any, rows: int) -> list[int]:
        """Per row of the `rows`-row batch just prefilled, the offset (position - index) of the tokens after its
        images."""
        ...

    def restore_position_offsets(self, network: Any, offsets: list[int]) -> None:
        """Make the next generate continue rows whose prefixes had these offsets (one per row)."""
        ...

    def with_image_marks(self, input_ids: Tensor, attention_mask: Tensor, encoded: ModelInputs, tokenizer: Any
                         ) -> dict[str, Tensor]:
        """Model inputs for token ids assembled outside the processor (attention capture): the ids and their mask,
        the family's image-token marks, and the image tensors of the processor's `encoded` output."""
        ...

    def image_features(self, network: Any, inputs: ModelInputs) -> Any:
        """The vision encoder's output for the images in `inputs` (profiling times it on its own)."""
        ...

    def image_tokens(self, processor: Any, inputs: ModelInputs) -> int:
        """Tokens the first image of `inputs` takes in the prompt."""
        ...


def context_length(config: Any) -> int:
    """Tokens the model's language half reads at most (prompt and output together): `max_position_embeddings` of
    its text config (Qwen3-VL's `text_config`, InternVL's `text_config` holding its Qwen3 LLM; a config with no
    separate text half is its own). Read from the checkpoint's config, before any weight loads."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    length = getattr(text, "max_position_embeddings", None)
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"the model's config names no context length (max_position_embeddings): {length!r}")
    return length


@runtime_checkable
class PromptSizing(Protocol):
    """How many prompt tokens an image takes, from its size alone (no pixel is processed): what the prompt-length
    check (mai/backends/prompt_length.py) adds for each image of a prompt to the tokens of its text."""

    def image_tokens_for_size(self, processor: Any, height: int, width: int) -> int:
        """Tokens an image of `height` x `width` pixels takes in the prompt, in place of its one placeholder token
        in the chat text (image markers around it included)."""
        ...

