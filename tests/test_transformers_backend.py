"""The transformers backend on the built-in tiny models: batching, token counts, timings, counters."""

from __future__ import annotations

from pathlib import Path

from mai.backends.registry import get_engine
from mai.backends.transformers_batching import TIMED_FROM
from mai.config import resolve_model
from mai.storage.paths import Home
from mai.types import ChatPrompt, Decoding, GenRequest


def requests(home: Path, decoding: Decoding) -> list[GenRequest]:
    import pyarrow.parquet as pq

    from mai.storage.samples import store_image

    rows = pq.read_table(Home.at(home).datasets / "demo" / "test-00000-of-00001.parquet").slice(0, 5).to_pylist()
    return [GenRequest(f"g{i}", f"s{i}", ChatPrompt(r["question"] + " word" * i,
                                                    (store_image(Home.at(home), r["image"]["bytes"])[0],)), decoding)
            for i, r in enumerate(rows)]


def test_batched_equals_unbatched_and_counts_are_consistent(home: Path) -> None:
    model = resolve_model("mai-tiny-small", "main", "float32", Home.at(home).models)
    engine = get_engine(model, "transformers")
    assert get_engine(model, "transformers") is engine  # one engine per model per process
    batch = requests(home, Decoding(max_new_tokens=10))
    batched = engine.generate(batch, batch_size=5)
    single = [engine.generate([r], batch_size=1)[0] for r in batch]
    assert [r.text for r in batched] == [r.text for r in single]
    assert [r.output_tokens for r in batched] == [r.output_tokens for r in single]
    assert [r.prompt_tokens for r in batched] == [r.prompt_tokens for r in single]
    assert len({r.prompt_tokens for r in batched}) > 1  # padded batch, yet padding is not counted (== unbatched)
    for result in batched:
        assert 1 <= result.output_tokens <= 10
        assert result.finish_reason == ("length" if result.output_tokens == 10 else "stop")
        assert result.ttft_s > 0 and result.decode_s >= 0 and result.wall_s >= result.ttft_s
    assert engine.counters.calls == 6 and engine.counters.generations == 10 and engine.counters.load_s > 0


def test_forced_output_length_is_exact(home: Path) -> None:
    model = resolve_model("mai-tiny-large", "main", "float32", Home.at(home).models)
    results = get_engine(model, "transformers").generate(requests(home, Decoding(16, min_new_tokens=16)), 3)
    assert [r.output_tokens for r in results] == [16] * 5


def test_a_calls_time_counts_its_prompts_encoding_as_a_vllm_server_does(home: Path, monkeypatch) -> None:
    """The image processing and tokenizing of a batch are part of each row's TTFT and wall time (the call's clock
    starts before them), so transformers and vLLM rows price the same work; here encoding is slowed by 0.3 s."""
    import time

    import mai.backends.transformers_backend as backend

    real_encode = backend.encode_prompts

    def slow_encode(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(backend, "encode_prompts", slow_encode)
    model = resolve_model("mai-tiny-small", "main", "float32", Home.at(home).models)
    results = get_engine(model, "transformers").generate(requests(home, Decoding(max_new_tokens=4)), batch_size=5)
    assert all(r.ttft_s >= 0.3 and r.wall_s >= r.ttft_s + r.decode_s - 1e-9 for r in results)
    # the regime says so: rows timed before the clock took in the encoding are another regime (docs/latency.md)
    assert all(TIMED_FROM in (r.engine or "") for r in results)
