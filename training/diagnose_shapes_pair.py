"""Does a shapes-pair checkpoint use the image? Two measurements that told apart the failure modes of #6.

    .venv/bin/python training/diagnose_shapes_pair.py mai/assets/models/mai-shapes-small --kinds S,R
    .venv/bin/python training/diagnose_shapes_pair.py build/shapes-pair/mai-shapes-large --kinds S,R,RT --walk

1. Image reliance: the answer-token loss per prompt kind on validation items with their own images, and again
   with every image swapped for the next item's. Equal losses mean the model ignores the image for that kind
   (it learned formats and priors only); the gap is how much it reads.
2. `--walk`: greedy R answers (the model's own grid walk) compared cell by cell with the true grid: the share
   of occupied cells whose colour, and whose shape, the walk names correctly (chance: 25 % colour, 33 % shape).

Prompts, targets and batches are exactly the training script's (`train_shapes_pair.make_example`, `Batcher`).
Read-only: nothing is trained or written.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_shapes_pair import Batcher, Example, make_example

from mai.benchmarks.shapes_world import GRID, SPLIT_SIZES, Scene, split_items
from mai.types import PromptKind


def image_reliance(model: Any, batcher: Batcher, items: list[tuple[Scene, Any]], kinds: list[PromptKind],
                   ) -> dict[str, dict[str, float]]:
    """Answer-token loss per kind with the true images and with images shifted by one item."""
    import torch

    rng = random.Random(0)
    out = {}
    for kind in kinds:
        examples = [make_example(scene, question, kind, rng, corrupt=0.0) for scene, question in items]
        swapped = [Example(e.prompt_text, e.target, examples[(i + 1) % len(examples)].scene)
                   for i, e in enumerate(examples)]
        with torch.no_grad():
            true, shuffled = (float(model(**batcher(batch)).loss) for batch in (examples, swapped))
        out[kind] = {"loss_true_images": round(true, 4), "loss_swapped_images": round(shuffled, 4),
                     "gap": round(shuffled - true, 4)}
    return out


def walk_accuracy(model: Any, batcher: Batcher, items: list[tuple[Scene, Any]], max_new_tokens: int = 160,
                  ) -> dict[str, float]:
    """Share of occupied cells whose colour / shape the model's own R grid walk names correctly."""
    import torch

    rng = random.Random(0)
    named = {"color": 0, "shape": 0}
    occupied = 0
    for scene, question in items:
        example = make_example(scene, question, "R", rng, corrupt=0.0)
        batch = batcher([Example(example.prompt_text, "", scene)])
        prompt_length = int((batch["labels"][0] == -100).sum())  # one example, no padding: the prompt part
        inputs = {k: (v[:, :prompt_length] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v)
                  for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        text = batcher.tokenizer.decode(output[0, prompt_length:], skip_special_tokens=True)
        seen = parse_walk(text)
        for slot, cell in enumerate(scene):
            if cell is None:
                continue
            occupied += 1
            words = seen[slot].split() if slot < len(seen) else []
            named["color"] += len(words) == 2 and words[0] == cell[0]
            named["shape"] += len(words) == 2 and words[1] == cell[1]
    return {k: round(v / max(occupied, 1), 4) for k, v in named.items()} | {"occupied_cells": occupied}


def parse_walk(text: str) -> list[str]:
    """`Row r: a, b, c, d.` lines -> the 16 cell descriptions in row-major order (missing ones empty)."""
    cells: list[str] = []
    rows = [line for line in text.splitlines() if line.startswith("Row ")][:GRID]
    for line in rows:
        described = line.split(":", 1)[1].strip().rstrip(".").split(", ")
        cells += (described + [""] * GRID)[:GRID]
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a model directory (weights, tokenizer, processor)")
    parser.add_argument("--kinds", default="S,R", help="prompt kinds for the image-reliance check")
    parser.add_argument("--items", type=int, default=96, help="validation items")
    parser.add_argument("--walk", action="store_true", help="also generate R walks and score them per cell")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen3VLForConditionalGeneration

    if args.threads:
        torch.set_num_threads(args.threads)
    model = Qwen3VLForConditionalGeneration.from_pretrained(args.checkpoint).eval()
    batcher = Batcher(AutoTokenizer.from_pretrained(args.checkpoint),
                      AutoImageProcessor.from_pretrained(args.checkpoint))
    items = split_items("validation", SPLIT_SIZES)[: args.items]
    report: dict[str, Any] = {"checkpoint": str(args.checkpoint), "items": len(items),
                              "image_reliance": image_reliance(model, batcher, items, args.kinds.split(","))}
    if args.walk:
        report["walk"] = walk_accuracy(model, batcher, items)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
