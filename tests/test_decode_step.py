"""The decoding loop inside a run (mai/backends/transformers_batching.py, compute.py): a static KV cache
(`MAI_DECODE=static`, compiled on CUDA) decodes the same tokens as the eager dynamic cache on the CPU; the step clock
costs one clock read per step; every device's calls go through the one compute thread; each result says how its
time was measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai.backends.compute import uses_compute_thread
from mai.backends.registry import clear_engines, get_engine
from mai.backends.transformers_batching import StepClock
from mai.config import resolve_model
from mai.errors import ConfigError
from mai.storage.paths import Home
from mai.types import Decoding, GenResult
from tests.test_transformers_backend import requests


def decoded(home: Path, name: str, batch_size: int) -> list[GenResult]:
    clear_engines()  # a fresh engine: no prefix of the other mode's calls
    model = resolve_model(name, "main", "float32", Home.at(home).models)
    return get_engine(model, "transformers").generate(requests(home, Decoding(max_new_tokens=12)), batch_size)


@pytest.mark.parametrize("name", ["mai-tiny-small", "mai-tiny-large"])
def test_a_static_kv_cache_decodes_the_tokens_of_the_eager_path(home: Path, name: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    eager = decoded(home, name, 5) + decoded(home, name, 1)
    monkeypatch.setenv("MAI_DECODE", "static")
    static = decoded(home, name, 5) + decoded(home, name, 1)
    assert [r.token_ids for r in static] == [r.token_ids for r in eager]
    assert {r.engine.rsplit(", ", 1)[-1] for r in eager} == {"dynamic KV cache"}  # the regime names how it decoded
    assert {r.engine.rsplit(", ", 1)[-1] for r in static} == {"static KV cache"}
    assert {r.device for r in static} == {"cpu"} and all(r.load_start is not None for r in static)
    monkeypatch.setenv("MAI_DECODE", "graphs")
    with pytest.raises(ConfigError, match="MAI_DECODE='graphs': choose one of"):
        decoded(home, name, 1)


def test_the_step_clock_reads_the_clock_once_per_step_and_finishes_rows_from_their_tokens() -> None:
    import torch

    clock = StepClock({2}, batch=2, start=0.0)
    ids = torch.tensor([[5, 7], [5, 2]])
    returned = {id(clock(ids, None)) for _ in range(3)}
    assert len(returned) == 1 and not clock(ids, None).any()  # one all-False tensor, not one per step
    assert len(clock.steps) == 4 and clock.first_token_at == clock.steps[0] and clock.last_step_at == clock.steps[-1]
    assert clock.finished_at([7, 2, 2, 2]) == clock.steps[1] and clock.finished_at([7, 7, 7, 7]) is None


def test_every_devices_calls_go_through_the_compute_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    assert uses_compute_thread("cuda:0") and uses_compute_thread("cpu")
    monkeypatch.setenv("MAI_COMPUTE_THREAD", "off")
    assert not uses_compute_thread("cuda:0")
