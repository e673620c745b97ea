"""KV reuse of the image + question prefix (mai/backends/prefix_kv.py): a model's later prompts of a sample (R and S2
after S on the small model, RT after S on the large one) continue from the keys and values of its earlier prefill
and give the same tokens as a full prefill; batches that mix cached and uncached rows, other requests run in
between (the M-RoPE offset the model keeps), and the store's bounds."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from mai import api
from mai.backends.prefix_kv import CachedPrefix, PrefixStore
from mai.backends.registry import clear_engines, get_engine
from mai.cascade import R_SMALL, RT_LARGE, S2_SMALL, S_LARGE, S_SMALL
from mai.config import shapes_pair_config
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS
from mai.evals.registry import get_benchmark
from mai.run.plan import prepare_run
from mai.stages import build_requests
from mai.storage.materialise import materialise_samples
from mai.storage.paths import Home
from mai.storage.samples import read_shard
from mai.types import GenResult, Sample, StageAnswer, StageSpec


def _shapes_samples(home: Path, limit: int) -> list[Sample]:
    """The first `limit` samples of the shapes test split, built and materialised in `home`."""
    config = shapes_pair_config(home=str(home), limit=limit)
    api.plan_run(config)
    plan = prepare_run(config, Home.at(home))
    (shard,) = materialise_samples(Home.at(home), config.benchmark, plan.source, 1, config.limit,
                                   DEFAULT_MAX_IMAGE_PIXELS, logging.getLogger("mai")).shard_paths
    return [s for s in read_shard(Home.at(home).root / shard) if s.error is None]


def _outputs(home: Path, samples: list[Sample], reuse: bool) -> dict[str, GenResult]:
    """The cascade's stages in its order, S on the small model for only the first half of the samples (so R mixes
    cached and uncached rows), each model's S before its later stages, and one unrelated prefill between a model's
    S and its continuations (it leaves its own M-RoPE offset in the model)."""
    config = shapes_pair_config(home=str(home))
    plan = prepare_run(config, Home.at(home))
    benchmark = get_benchmark(config.benchmark)
    upstream = {s.sample_id: StageAnswer(gen_id=f"u{i}", text=" ".join(["there are two red shapes"] * (i % 9)),
                                         answer=None) for i, s in enumerate(samples)}
    clear_engines()
    results: dict[str, GenResult] = {}

    def run(stage: StageSpec, chosen: list[Sample], batch_size: int = 16) -> list[GenResult]:
        model = plan.models[stage.role]
        engine = get_engine(model, "transformers")
        if not reuse:
            engine.prefixes.max_bytes = 0  # type: ignore[attr-defined]
        decoding = plan.decodings.get(stage.prompt_kind, plan.decodings["S"])
        out = engine.generate(build_requests(stage, chosen, benchmark, model, decoding, upstream,
                                             plan.backend_ids[stage.role]), batch_size)
        results.update({r.gen_id: r for r in out})
        return out

    half = len(samples) // 2
    run(S_SMALL, samples[:half])
    run(S_LARGE, samples[half:], batch_size=1)  # another model: its prefills never serve the small model
    run(S_SMALL, samples[-1:] + samples[:1], batch_size=2)  # an unrelated prefill on the small model in between
    r_small = run(R_SMALL, samples)
    if reuse:
        cached = [r.cached_prompt_tokens or 0 for r in r_small]
        # batches of 16 over 24 samples: both hold rows that continue and rows that prefill in full
        assert all(n > 0 for n in cached[:half] + cached[-1:]) and not any(cached[half:-1])
    run(S2_SMALL, samples)
    run(S_LARGE, samples[:half])
    run(RT_LARGE, samples)
    return results


@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_continuing_from_a_cached_prefix_gives_the_tokens_of_a_full_prefill(home: Path) -> None:
    samples = _shapes_samples(home, limit=24)

    reused = _outputs(home, samples, reuse=True)
    full = _outputs(home, samples, reuse=False)

    assert {g: r.token_ids for g, r in reused.items()} == {g: r.token_ids for g, r in full.items()}
    assert {g: r.text for g, r in reused.items()} == {g: r.text for g, r in full.items()}
    assert {g: r.prompt_tokens for g, r in reused.items()} == {g: r.prompt_tokens for g, r in full.items()}
    assert not any(r.cached_prompt_tokens for r in full.values())
    continued = [r for r in reused.values() if r.cached_prompt_tokens]
    # R (first half), S2 (every sample: R stored the rest), RT (first half after the large model's S)
    assert len(continued) >= len(samples) // 2 + len(samples) + len(samples) // 2
    assert all(0 < (r.cached_prompt_tokens or 0) < r.prompt_tokens for r in continued)
    assert max(r.prompt_tokens - (r.cached_prompt_tokens or 0) for r in continued) > 100  # long S2/RT rests


@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_a_batch_too_large_for_the_store_is_not_kept(home: Path) -> None:
    samples = _shapes_samples(home, limit=8)
    config = shapes_pair_config(home=str(home))
    plan = prepare_run(config, Home.at(home))
    model = plan.models["small"]
    engine = get_engine(model, "transformers")
    benchmark = get_benchmark(config.benchmark)
    s_requests = build_requests(S_SMALL, samples, benchmark, model, plan.decodings["S"], {}, plan.backend_ids["small"])
    engine.generate(s_requests[:1], batch_size=1)
    one_prompt = engine.prefixes.bytes  # type: ignore[attr-defined]
    assert one_prompt > 0
    engine.prefixes.max_bytes = 3 * one_prompt  # type: ignore[attr-defined]
    engine.generate(s_requests[1:], batch_size=len(samples))  # 7 prompts at once: more than the store holds
    assert engine.prefixes.bytes == one_prompt  # type: ignore[attr-defined]
    r_results = engine.generate(build_requests(R_SMALL, samples, benchmark, model, plan.decodings["R"], {},
                                               plan.backend_ids["small"]), 8)
    assert [bool(r.cached_prompt_tokens) for r in r_results] == [True] + [False] * (len(samples) - 1)


def _prefix(tokens: tuple[int, ...], width: int = 4) -> CachedPrefix:
    block = torch.zeros(1, len(tokens), width)
    return CachedPrefix(token_ids=tokens, keys=(block,), values=(block.clone(),), rope_delta=-3)


def test_the_prefix_store_finds_the_longest_shared_prefix_within_its_byte_bound(tmp_path: Path) -> None:
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    one.write_bytes(b"a")
    two.write_bytes(b"b")
    entry_bytes = _prefix((1, 2, 3, 4)).nbytes
    store = PrefixStore(max_bytes=3 * entry_bytes)
    store.put((str(one),), _prefix((1, 2, 3, 4)))
    store.put((str(one),), _prefix((1, 2, 9, 9)))
    store.put((), _prefix((1, 2, 3, 4)))  # no image: not kept
    assert store.bytes == 2 * entry_bytes

    hit = store.find((str(one),), [1, 2, 3, 7, 7], first_new_token=2)
    assert hit is not None and (hit.prefix.token_ids, hit.tokens) == ((1, 2, 3, 4), 3)
    same = store.find((str(one),), [1, 2, 3, 4], first_new_token=2)
    assert same is not None and same.tokens == 3  # the last token is always prefilled: it gives the first output
    assert store.find((str(one),), [1, 2, 3, 7], first_new_token=4) is None  # the image is not all in the prefix
    assert store.find((str(two),), [1, 2, 3, 7], first_new_token=2) is None  # another image

    store.put((str(two),), _prefix((5, 6, 7, 8)))
    store.put((str(two),), _prefix((5, 6, 0, 0)))  # over the bound: the least recently used, (1, 2, 9, 9), goes
    assert store.bytes == 3 * entry_bytes
    hit = store.find((str(one),), [1, 2, 9, 9, 5], first_new_token=2)
    assert hit is not None and hit.prefix.token_ids == (1, 2, 3, 4)

    os.utime(one, ns=(1, 1))  # the file changed: another image
    assert store.find((str(one),), [1, 2, 3, 7], first_new_token=2) is None
    assert (store.hits, store.misses) == (3, 3)
    assert PrefixStore(max_bytes=0).find((str(two),), [5, 6, 7, 8], first_new_token=1) is None


def test_a_mixed_batch_runs_as_two_calls_only_on_a_cpu() -> None:
    """The GPU side of this rule was measured on an H100 (docs/benchmarks.md, GPU) and cannot run here; the CPU
    side is what `test_continuing_from_a_cached_prefix_gives_the_tokens_of_a_full_prefill` exercises."""
    from mai.backends.transformers_backend import splits_mixed_batches

    assert splits_mixed_batches("cpu") and not splits_mixed_batches("cuda")


# slow: it needs the session's shapes splits (200 MB, about 30 s of CPU to build), which the fast tier never builds
@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_a_split_mixed_batch_times_every_row_from_the_batchs_start(home: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """On a CPU a batch whose rows partly continue from cached prefixes runs as two generate calls, the fresh rows
    first: the continued rows wait for them, so their times count from the batch's start too, and the batch's
    engine time (its slowest row's) is what the batch took. The fresh rows' call is slowed by 0.3 s here."""
    import time

    import mai.backends.transformers_backend as backend

    samples = _shapes_samples(home, limit=4)
    config = shapes_pair_config(home=str(home))
    plan = prepare_run(config, Home.at(home))
    benchmark = get_benchmark(config.benchmark)
    upstream = {s.sample_id: StageAnswer(gen_id=f"u{i}", text="two", answer=None) for i, s in enumerate(samples)}
    clear_engines()
    model = plan.models[S_SMALL.role]
    engine = get_engine(model, "transformers")

    def generate(stage: StageSpec, chosen: list[Sample]) -> list[GenResult]:
        decoding = plan.decodings.get(stage.prompt_kind, plan.decodings["S"])
        return engine.generate(build_requests(stage, chosen, benchmark, model, decoding, upstream,
                                              plan.backend_ids[stage.role]), len(chosen))

    generate(S_SMALL, samples[:2])  # the first two samples' prefixes cached
    real_prefill = backend.prefill_and_generate

    def slow_prefill(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return real_prefill(*args, **kwargs)

    monkeypatch.setattr(backend, "prefill_and_generate", slow_prefill)
    results = generate(R_SMALL, samples)
    continued = [r for r in results if r.cached_prompt_tokens]
    assert len(continued) == 2 and all(r.batch_size == 2 for r in results)  # two calls of two rows
    assert all(r.ttft_s >= 0.3 for r in continued)  # they started after the fresh rows' call
