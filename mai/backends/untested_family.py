"""Any other Hugging Face image-text-to-text model with a chat template: loaded through `AutoProcessor` /
`AutoModelForImageTextToText` as an untested family, with a warning.

What the engine needs of a family beyond transformers' common API is done the generic way: the checkpoint's own
processor renders and encodes the prompts, every tensor it returns goes to the model, and prefix reuse is off
(how a family numbers positions after its images is not known here, so a continuation could be wrong without any
error). Attention capture works where the language model's attention layers go through transformers' attention
interface. Tested families: Qwen-VL (qwen_vl.py) and InternVL (internvl.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mai.backends.model_family import ModelInputs
from mai.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

LOG = logging.getLogger("mai")
TEXT_INPUTS = ("input_ids", "attention_mask")


class UntestedFamily:
    name = "untested"

    def matches(self, config: Any) -> bool:
        return True

    def load_processor(self, path: str, revision: str | None, tokenizer: Any) -> Any:
        from transformers import AutoProcessor, ProcessorMixin

        LOG.warning("model %s is of an untested family (model_type %r): it runs through AutoProcessor and "
                    "AutoModelForImageTextToText with prefix reuse off; tested families are Qwen-VL and InternVL",
                    path, _model_type(path, revision))
        processor = AutoProcessor.from_pretrained(path, revision=revision)
        if not isinstance(processor, ProcessorMixin):  # AutoProcessor falls back to the bare tokenizer
            raise ConfigError(f"model {path} has no image processor that transformers can load (AutoProcessor gave "
                              f"a {type(processor).__name__}): it is not an image-text-to-text checkpoint")
        processor.tokenizer.padding_side = "left"
        return processor

    def continues_prefixes(self, network: Any, inputs: ModelInputs) -> bool:
        return False

    def text_after_images(self, network: Any, inputs: ModelInputs, row: int) -> int:
        return 0

    def position_offsets(self, network: Any, rows: int) -> list[int]:
        return [0] * rows

    def restore_position_offsets(self, network: Any, offsets: list[int]) -> None:
        return None

    def with_image_marks(self, input_ids: Tensor, attention_mask: Tensor, encoded: ModelInputs, tokenizer: Any
                         ) -> dict[str, Tensor]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        # the image tensors; per-token marks (`token_type_ids`, ...) belong to the processor's ids, not these
        inputs.update({name: tensor for name, tensor in encoded.items()
                       if name not in TEXT_INPUTS and not name.endswith("token_type_ids")})
        return inputs

    def image_features(self, network: Any, inputs: ModelInputs) -> Any:
        vision = {name: tensor for name, tensor in inputs.items() if name not in TEXT_INPUTS}
        return network.get_image_features(**vision)

    def image_tokens(self, processor: Any, inputs: ModelInputs) -> int:
        image_id = getattr(processor, "image_token_id", None)
        return 0 if image_id is None else int((inputs["input_ids"][0] == int(image_id)).sum())


# checkpoints whose config.json names a model that transformers runs only with the repository's own code
# (trust_remote_code), with what to use instead
REMOTE_CODE_LAYOUTS = {
    "internvl_chat": "InternVL's original repositories (InternVLChatModel) need their own code: use the "
                     "Hugging Face-format repository of the same model (its name ends in -HF, e.g. "
                     "OpenGVLab/InternVL3_5-8B-HF), which transformers loads as InternVLForConditionalGeneration",
}


def check_checkpoint_config(name: str, config: Mapping[str, object]) -> None:
    """Refuse, before anything loads, a checkpoint whose config.json transformers cannot run without remote code."""
    model_type = str(config.get("model_type", ""))
    if model_type in REMOTE_CODE_LAYOUTS:
        raise ConfigError(f"model '{name}' (model_type {model_type!r}) is not supported: "
                          f"{REMOTE_CODE_LAYOUTS[model_type]}")


def _model_type(path: str, revision: str | None) -> str:
    from transformers import AutoConfig

    return str(getattr(AutoConfig.from_pretrained(path, revision=revision), "model_type", "?"))


UNTESTED = UntestedFamily()
