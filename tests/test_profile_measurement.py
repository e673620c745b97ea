"""`mai profile` measures TTFT and decode time within one forced generation (its step clock), so short forced outputs
never store a negative decode time or a missing tokens/s (a forced-N call minus a separate forced-1 call would
carry the noise of two calls, more than the few steps between them, and can come out negative)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mai.flows.profiles import mai_profile
from mai.storage.catalog import query
from mai.storage.paths import Home


@pytest.mark.prefect
def test_short_forced_outputs_have_a_positive_decode_time(home: Path) -> None:
    rows = mai_profile("mai-tiny-large", "short", resolutions=[64], query_tokens=[256], output_tokens=[1, 2, 3],
                       repeats=5, home=str(home))
    by_n = {r["output_tokens"]: r for r in rows}
    assert sorted(by_n) == [1, 2, 3]
    assert by_n[1]["decode_ms_max"] == 0.0 and by_n[1]["tokens_per_s"] is None  # one token: no decoding step
    for n in (2, 3):
        assert by_n[n]["decode_ms_min"] > 0 and by_n[n]["tokens_per_s"] > 0
        assert by_n[n]["tokens_per_s"] == (n - 1) / (by_n[n]["decode_ms"] / 1000)
    assert all(r["ttft_ms_min"] > 0 for r in rows)
    _, stored = query(Home.at(home), "SELECT min(decode_ms), count(*) FILTER (WHERE output_tokens > 1 AND "
                                     "tokens_per_s IS NULL) FROM latency_profiles WHERE profile_name = 'short'")
    assert stored[0][0] >= 0 and stored[0][1] == 0


@pytest.mark.prefect
def test_a_stopped_profile_keeps_its_measured_points_and_a_taken_name_fails_before_loading(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lent GPU's time limit stopped a profile part-way and kept nothing: each point is now written as soon as it
    is measured. A name already taken fails before the model loads, not after the timing."""
    from mai.backends.registry import clear_engines, loaded_engines
    from mai.backends.transformers_backend import TransformersEngine
    from mai.errors import ConfigError

    measure, calls = TransformersEngine.profile, []

    def stopped_at_the_second_point(self: TransformersEngine, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a time limit's SIGINT is to the process
        return measure(self, *args, **kwargs)

    monkeypatch.setattr(TransformersEngine, "profile", stopped_at_the_second_point)
    with pytest.raises(KeyboardInterrupt):
        mai_profile("mai-tiny-large", "stopped", resolutions=[64], query_tokens=[16], output_tokens=[2, 3],
                    repeats=1, home=str(home))
    _, stored = query(Home.at(home), "SELECT output_tokens FROM latency_profiles WHERE profile_name = 'stopped'")
    assert stored == [(2,)]
    clear_engines()
    with pytest.raises(ConfigError, match="exists: choose another name or pass --replace"):
        mai_profile("mai-tiny-large", "stopped", resolutions=[64], query_tokens=[16], output_tokens=[2],
                    repeats=1, home=str(home))
    assert loaded_engines() == []


def test_a_profiles_ttft_counts_the_inputs_preprocessing(home: Path) -> None:
    """A profile's TTFT starts before the input is preprocessed, as a run's stored calls and a vLLM server's TTFT
    do, so an estimate from it prices what a measured call covers: preprocessing slowed by 0.2 s shows in every TTFT."""
    import time
    from dataclasses import replace

    from mai.backends.registry import get_engine
    from mai.backends.transformers_profiling import measure_profile_point
    from mai.config import resolve_model

    class SlowProcessor:
        def __init__(self, processor: Any) -> None:
            self.processor = processor

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.2)
            return self.processor(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.processor, name)

    engine = get_engine(resolve_model("mai-tiny-small", "main", "float32", Home.at(home).models), "transformers")
    model = engine.load()
    point = measure_profile_point(replace(model, processor=SlowProcessor(model.processor)), 64, 16, 4, repeats=2)
    assert min(point.timings.preprocess) >= 0.2 and min(point.timings.ttft) >= 0.2
