"""What the vLLM side reads from a model's files without loading the model: its end-of-sequence ids, its tokenizer
(for decoding ids as transformers does) and the attention head size (vLLM's CPU kernels support only some)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from mai.types import ModelSpec

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class TextConfigJson(TypedDict, total=False):
    """The fields read from a checkpoint's config.json (or its text model's part of it)."""

    eos_token_id: int | list[int] | None
    head_dim: int | None
    hidden_size: int
    num_attention_heads: int


class ModelConfigJson(TextConfigJson, total=False):
    text_config: TextConfigJson | None
    llm_config: TextConfigJson | None  # InternVL's name for its language model's config


def model_file(model: ModelSpec, name: str) -> Path | None:
    """A file of the checkpoint (local directory or hub), None when it has none of that name."""
    if model.local:
        path = Path(model.name_or_path) / name
        return path if path.exists() else None
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(model.name_or_path, name, revision=model.revision))
    except Exception:  # noqa: BLE001  # a missing optional file (generation_config.json) is normal
        return None


def stop_token_ids(model: ModelSpec) -> list[int]:
    """The end-of-sequence ids transformers stops on (generation_config.json, else config.json), so both
    backends stop at the same token."""
    for name in ("generation_config.json", "config.json"):
        path = model_file(model, name)
        if path is not None:
            config: ModelConfigJson = json.loads(path.read_text())
            eos = config.get("eos_token_id", (config.get("text_config") or {}).get("eos_token_id"))
            if eos is not None:
                return sorted(set(eos if isinstance(eos, list) else [eos]))
    return []


def load_detokenizer(model: ModelSpec) -> Tokenizer | None:
    """The model's tokenizer (the `tokenizers` library, no model code). The streamed text is vLLM's incremental
    detokenization, which holds back an incomplete UTF-8 sequence at the end where a plain decode (what the
    transformers backend stores) writes U+FFFD; decoding the ids ourselves makes the texts equal too."""
    path = model_file(model, "tokenizer.json")
    if path is None:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def attention_head_dim(model: ModelSpec) -> int | None:
    """The language model's attention head size from config.json (None without one)."""
    path = model_file(model, "config.json")
    if path is None:
        return None
    config: ModelConfigJson = json.loads(path.read_text())
    text = config.get("text_config") or config.get("llm_config") or config
    return text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
