"""A decoding step inside a run against a step of plain `generate`, on the same model, batch and device.

Inside a run: `TransformersEngine.generate`, the path every `mai run` stage takes (the compute thread on the CPU,
the step clock that times each row, prefix continuation from the model's cached image + question prefill, with a
warm-up call that fills that cache as a run's S stage does). Plain: `network.generate` on the same encoded
inputs, on the same thread (the process's compute thread: one OpenMP team for both paths), with a stopping
criterion that only reads the clock. Both decode exactly N tokens
per row (`min_new_tokens = max_new_tokens = N`); a mean step is (last step - first token) / (N - 1), which leaves
out the prefill. Each case is the median over `--repeats` calls per path, the paths alternating and each going
first in every other pair (ABBA).

Run: `.venv/bin/python benchmarks/engine_step.py [--models mai-tiny-small,mai-tiny-large,random:qwen3-vl-2b]
[--batches 1,8] [--tokens 64] [--repeats 10] [--random-tokens 6] [--random-repeats 2] [--home DIR]`: the
real-size random-weight models (`random:...`) decode fewer tokens, fewer times (a CPU step of the 2B takes seconds).
The tiny pair decodes 64 tokens (the demo's answers run to 96) in 10 calls per path: with 16 tokens in 5 calls, a
mean over 15 steps of 2-6 ms moved by 10-15 % from call to call on this 2-core CPU while the per-step medians of the
two paths agreed within 2 % (docs/benchmarks.md, "Engine step"). It prints a line per case and ends with
`ratio <max over cases of run step / plain step>` (goal <= 1.10). Results: docs/benchmarks.md, "Engine step".
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mai.backends.transformers_backend import TransformersEngine
from mai.backends.transformers_inputs import encode_prompts
from mai.backends.transformers_loading import on_model_thread
from mai.config import resolve_model
from mai.storage.paths import Home
from mai.types import ChatPrompt, Decoding, GenRequest

QUESTION = "How many red shapes are in the picture? Think it through, then answer."


class Steps:
    """A stopping criterion that never stops and only timestamps each step."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.at.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def image(folder: Path) -> str:
    from PIL import Image

    path = folder / "picture.png"
    Image.new("RGB", (256, 256), (200, 40, 40)).save(path)
    return str(path)


def requests(batch: int, tokens: int, picture: str, call: int) -> list[GenRequest]:
    decoding = Decoding(max_new_tokens=tokens, min_new_tokens=tokens)
    return [GenRequest(gen_id=f"c{call}-r{row}", sample_id=f"s{row}",
                       prompt=ChatPrompt(f"{QUESTION} ({row})", (picture,)), decoding=decoding)
            for row in range(batch)]


def run_step(engine: TransformersEngine, batch: list[GenRequest]) -> float:
    results = engine.generate(batch, batch_size=len(batch))
    return statistics.mean(r.decode_s / (r.output_tokens - 1) for r in results)


def plain_step(engine: TransformersEngine, batch: list[GenRequest], tokens: int) -> float:
    import torch

    model = engine.load()
    inputs = encode_prompts(batch, model.processor, model.device)
    steps = Steps()

    def generate() -> None:
        with torch.inference_mode():
            model.network.generate(**inputs, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                   num_beams=1, pad_token_id=model.network.generation_config.pad_token_id,
                                   stopping_criteria=[steps])

    on_model_thread(generate)  # the thread a process's model calls run on: one OpenMP team for both paths
    return (steps.at[-1] - steps.at[0]) / (len(steps.at) - 1)


def measure(engine: TransformersEngine, batch: int, tokens: int, repeats: int, picture: str) -> tuple[float, float]:
    run_step(engine, requests(batch, 2, picture, 0))  # warm-up; fills the prefix cache, as a run's S stage does
    plain_step(engine, requests(batch, 2, picture, 0), 2)
    ran: list[float] = []
    plain: list[float] = []
    # ABBA: which path goes first alternates from call to call. The order alone moved a tiny model's batch-8 ratio
    # by 15 % on a quiet CPU (run first: 1.14-1.18; plain first: 1.00-1.01), whichever path was timed
    for call in range(1, repeats + 1):
        for path in ("run", "plain") if call % 2 else ("plain", "run"):
            if path == "run":
                ran.append(run_step(engine, requests(batch, tokens, picture, call)))
            else:
                plain.append(plain_step(engine, requests(batch, tokens, picture, call), tokens))
    return statistics.median(ran), statistics.median(plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mai-tiny-small,mai-tiny-large,random:qwen3-vl-2b")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--random-tokens", type=int, default=6)
    parser.add_argument("--random-repeats", type=int, default=2)
    parser.add_argument("--home", type=Path, help="a store with the built-in models (default: built in a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Home.at(args.home or Path(scratch) / "home")
        if args.home is None:
            from mai.run.assets import build_models

            build_models(home, names=["mai-tiny-small", "mai-tiny-large"])
        picture = image(Path(scratch))
        ratios = []
        print(f"load at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        for name in args.models.split(","):
            engine = TransformersEngine(resolve_model(name, "main", "float32", home.models))
            for batch in (int(b) for b in args.batches.split(",")):
                real_size = name.startswith("random:")
                ran, plain = measure(engine, batch, args.random_tokens if real_size else args.tokens,
                                     args.random_repeats if real_size else args.repeats, picture)
                ratios.append(ran / plain)
                print(f"{name} batch {batch}: run step {ran * 1000:.2f} ms, plain generate step {plain * 1000:.2f} ms, "
                      f"ratio {ran / plain:.3f} (load {os.getloadavg()[0]:.2f})", flush=True)
        print(f"ratio {max(ratios):.3f}")


if __name__ == "__main__":
    main()
