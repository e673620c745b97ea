"""Loading a transformers model (checkpoint or random real-size architecture) with its processor, tokenizer and
family, and running model code on the right thread.

float32 on CPU (batched == unbatched greedy holds in float32, not in bfloat16: tests/test_speedup.py, `mai parity`);
on GPU the dtype is whatever the ModelSpec says. On the CPU every call runs on the process's one compute thread
(mai/backends/compute.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mai.backends.architectures import build_random_architecture, is_random_architecture
from mai.backends.base import TRANSFORMERS_ATTENTION
from mai.backends.compute import on_compute_thread, uses_compute_thread
from mai.backends.internvl import INTERNVL
from mai.backends.model_family import ModelFamily
from mai.backends.qwen_vl import QWEN_VL
from mai.backends.untested_family import UNTESTED
from mai.types import ModelSpec

T = TypeVar("T")

# The tested families, in the order they are tried (by the checkpoint's config, before its weights load); a model
# none of them claims runs as an untested family (AutoProcessor / AutoModelForImageTextToText, prefix reuse off,
# a warning when it loads).
FAMILIES: tuple[ModelFamily, ...] = (QWEN_VL, INTERNVL)
DEFAULT_FAMILY: ModelFamily = UNTESTED

# transformers' lazy module imports are not thread-safe (two engines loading at once in the MV1 stage
# saw "cannot import name AutoModelForImageTextToText"): loads are serialised process-wide
_LOAD_LOCK = threading.Lock()


@dataclass(frozen=True)
class LoadedModel:
    network: Any
    processor: Any
    tokenizer: Any
    family: ModelFamily

    @property
    def device(self) -> Any:
        return self.network.device


def family_of(config: Any) -> ModelFamily:
    """The family of a model with this transformers config (a checkpoint's or a loaded network's)."""
    return next((family for family in FAMILIES if family.matches(config)), DEFAULT_FAMILY)


def device_name() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def on_model_thread(fn: Callable[[], T]) -> T:
    """`fn()` where this process computes on the CPU: its one compute thread (mai.backends.compute)."""
    return on_compute_thread(fn) if uses_compute_thread(device_name()) else fn()


def load_model(spec: ModelSpec) -> LoadedModel:
    """The model of `spec` on this process's device, evaluation mode. Call it on the model thread."""
    with _LOAD_LOCK:
        load = _load_random if is_random_architecture(spec.name_or_path) else _load_checkpoint
        network, processor, tokenizer = load(spec)
    return LoadedModel(network, processor, tokenizer, family_of(network.config))


def _load_random(spec: ModelSpec) -> tuple[Any, Any, Any]:
    import tempfile
    from pathlib import Path

    import torch

    return build_random_architecture(spec.name_or_path, getattr(torch, spec.dtype), device_name(),
                                     Path(tempfile.mkdtemp(prefix="mai-arch-")))


def _load_checkpoint(spec: ModelSpec) -> tuple[Any, Any, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer

    revision = None if spec.local else spec.revision
    path = spec.name_or_path
    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, padding_side="left")
    family = family_of(AutoConfig.from_pretrained(path, revision=revision))
    processor = family.load_processor(path, revision, tokenizer)
    network = AutoModelForImageTextToText.from_pretrained(path, revision=revision, dtype=getattr(torch, spec.dtype),
                                                          attn_implementation=TRANSFORMERS_ATTENTION)
    network = network.to(device_name()).eval()  # type: ignore[arg-type]  # transformers' stub of .to
    return network, processor, tokenizer
