"""The backend contract: one engine per model per process, batched generation, call counters."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mai.types import GenRequest, GenResult, ModelSpec

BACKENDS = ("transformers", "vllm")
# the attention the transformers backend loads its models with (a generation's `attention_implementation`); the
# attention capture swaps in its own function for a prefill and back (mai/backends/attention.py)
TRANSFORMERS_ATTENTION = "sdpa"


@dataclass
class EngineCounters:
    """What an engine did in this process; tests and the manifest read these."""

    calls: int = 0
    generations: int = 0
    load_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, generations: int) -> None:
        with self.lock:
            self.calls += 1
            self.generations += generations


@dataclass(frozen=True)
class EngineOptions:
    """Per-run settings of an engine that do not change its outputs (so not part of any identity)."""

    url: str | None = None   # vLLM: an already running server for this model
    env: str | None = None   # vLLM: the environment to start `vllm serve` from (default: $MAI_VLLM_ENV)
    home: str | None = None  # vLLM: store root, for server logs and the `mai serve` registry


class Engine(Protocol):
    model: ModelSpec
    backend: str
    counters: EngineCounters

    def generate(
        self, requests: list[GenRequest], batch_size: int, on_batch: Callable[[list[GenResult]], None] | None = None
    ) -> list[GenResult]:
        """Greedy generation for every request, in order. `on_batch` is called after each batch so the
        caller can persist results as they come (a run killed mid-stage loses at most one batch)."""
        ...
