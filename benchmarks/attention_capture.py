"""Cost of the sparse-RT attention capture (results in docs/benchmarks.md).

(a) time of a prefill with last-row capture at every layer vs a plain sdpa prefill vs an eager prefill with
    output_attentions (full maps), on the tiny large model, same padded batch;
(b) memory the captured attention occupies vs the full attention maps (measured on the tiny model, and
    computed for Qwen3-VL-8B shapes at 1.5k tokens);
(c) tokens transferred by sparse RT vs full RT on the demo (delta 0.8, every layer of the tiny model).

Run: `.venv/bin/python benchmarks/attention_capture.py [--reasoning-tokens 48 512] [--repeats 7]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mai.storage.paths import Home

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


@dataclass(frozen=True)
class PrefillCost:
    """(a) and (b) on the tiny model: one padded batch, its prefill timed three ways and its attention's size."""

    reasoning_tokens: int
    batch: int
    sequence_tokens: int
    plain_prefill_ms: float
    capture_prefill_ms: float
    eager_full_maps_ms: float
    capture_over_plain: float
    captured_bytes: int
    full_maps_bytes: int


@dataclass(frozen=True)
class AttentionMemory:
    """(b) computed for a model's shapes: full attention maps vs the last row at every layer."""

    model: str
    tokens: int
    full_maps_GiB_fp32: float
    last_row_all_layers_KiB_fp32: float


@dataclass(frozen=True)
class TransferredTokens:
    """(c) per layer of the sweep: samples, reasoning tokens full RT sends, tokens sparse RT sends, their share."""

    layer: int
    samples: int
    full_rt_tokens: float
    sparse_rt_tokens: float
    share: float


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds after one warm-up (the same timing loop the profiler uses)."""
    from mai.backends.transformers_profiling import repeat_timed

    return statistics.median(repeat_timed(fn, repeats))


def prefill_costs(home: Home, reasoning_tokens: int, repeats: int, batch: int = 4) -> PrefillCost:
    import torch

    from mai.backends.attention import capturing
    from mai.backends.registry import get_engine
    from mai.backends.transformers_backend import TransformersEngine
    from mai.backends.transformers_capture import capture_inputs
    from mai.config import resolve_model
    from mai.types import REASONING_MARK, CaptureRequest, ChatPrompt

    engine = get_engine(resolve_model("mai-tiny-large", "main", "float32", home.models), "transformers")
    assert isinstance(engine, TransformersEngine)
    model = engine.load()
    network = model.network
    image = next(p for p in home.images.rglob("*") if p.is_file())
    requests = [CaptureRequest(f"c{i}", f"s{i}", ChatPrompt(f"Question {i}?\nReference: {REASONING_MARK}\nAnswer.",
                                                            (str(image),)),
                               tuple(engine.encode(" reason" * (reasoning_tokens - 8 * i))[: reasoning_tokens - 8 * i]))
                for i in range(batch)]
    inputs, _ = capture_inputs(requests, model, model.device)
    layers = set(range(engine.num_layers()))

    def plain() -> None:
        with torch.no_grad():
            network(**inputs)

    def capture() -> None:
        with torch.no_grad(), capturing(network, layers):
            network(**inputs)

    def eager() -> None:
        with torch.no_grad():
            network(**inputs, output_attentions=True)

    plain_s, capture_s = timed(plain, repeats), timed(capture, repeats)
    network.set_attn_implementation({"text_config": "eager"})
    eager_s = timed(eager, repeats)
    with torch.no_grad():
        maps = network(**inputs, output_attentions=True).attentions
    network.set_attn_implementation({"text_config": "sdpa"})
    with torch.no_grad(), capturing(network, layers) as captured:
        network(**inputs)
    sequence = int(inputs["input_ids"].shape[1])
    return PrefillCost(
        reasoning_tokens=reasoning_tokens, batch=batch, sequence_tokens=sequence,
        plain_prefill_ms=round(plain_s * 1e3, 2), capture_prefill_ms=round(capture_s * 1e3, 2),
        eager_full_maps_ms=round(eager_s * 1e3, 2), capture_over_plain=round(capture_s / plain_s, 3),
        captured_bytes=int(sum(t.numel() * t.element_size() for t in captured.values())),
        full_maps_bytes=int(sum(t.numel() * t.element_size() for t in maps)))


def qwen3_vl_8b_memory(tokens: int = 1500) -> AttentionMemory:
    layers, heads = 36, 32  # Qwen3-VL-8B's text layers and attention heads (its official config.json)
    return AttentionMemory(model="Qwen3-VL-8B (shapes)", tokens=tokens,
                           full_maps_GiB_fp32=round(layers * heads * tokens * tokens * 4 / 2**30, 2),
                           last_row_all_layers_KiB_fp32=round(layers * heads * tokens * 4 / 2**10, 1))


def transferred_tokens(home: Home) -> list[TransferredTokens]:
    from mai.config import DEMO_MAX_NEW_TOKENS, RunConfig
    from mai.flows.sweep import mai_sweep
    from mai.storage.catalog import query

    config = RunConfig(home=str(home.root), limit=120, max_new_tokens={**DEMO_MAX_NEW_TOKENS, "R": 96})
    mai_sweep(config, layers=[0, 1, 2, 3])
    _, rows = query(home, "SELECT layer, count(*) AS samples, avg(n_reasoning_tokens) AS full_rt_tokens, "
                          "avg(transferred_tokens) AS sparse_rt_tokens, avg(share_selected) AS share "
                          "FROM selections GROUP BY layer ORDER BY layer")
    return [TransferredTokens(int(layer), int(samples), round(float(full), 3), round(float(sparse), 3),
                              round(float(share), 3))
            for layer, samples, full, sparse, share in (_numbers(row) for row in rows)]


def _numbers(row: tuple[object, ...]) -> tuple[float, ...]:
    if not all(isinstance(value, (int, float)) for value in row):
        raise TypeError(f"expected numbers from the query, got {row!r}")
    return tuple(value for value in row if isinstance(value, (int, float)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reasoning-tokens", type=int, nargs="+", default=[48, 512])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    from mai.run.assets import build_demo_dataset, build_models
    from mai.storage.paths import Home

    home = Home.at(tempfile.mkdtemp(prefix="mai-capture-bench-"))
    build_models(home)
    build_demo_dataset(home)
    transfer = transferred_tokens(home)  # also stores the demo images the prefill benchmark uses
    report = {"prefill": [asdict(prefill_costs(home, n, args.repeats)) for n in args.reasoning_tokens],
              "memory_8b": asdict(qwen3_vl_8b_memory()), "tokens_transferred_demo": [asdict(t) for t in transfer]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
