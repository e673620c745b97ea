"""Does a shapes-pair checkpoint use the image, and does its reasoning follow its own walk?

Measurements that tell apart why a pair fails: it ignores the image, misreads it, or concludes otherwise than
its own walk.

    .venv/bin/python training/diagnose_shapes_pair.py mai/assets/models/mai-shapes-small --kinds S,R
    .venv/bin/python training/diagnose_shapes_pair.py build/shapes-pair/mai-shapes-large --kinds S,R,RT --walk

1. Image reliance: the answer-token loss per prompt kind on validation items with their own images, and again
   with every image swapped for the next item's. Equal losses mean the model ignores the image for that kind
   (it learned formats and priors only); the gap is how much it reads.
2. `--walk`: greedy R answers (the model's own grid walk) compared cell by cell with the true grid: the share
   of occupied cells whose colour, and whose shape, the walk names correctly (chance: 25 % colour, 33 % shape).
3. `--home H --r-run RUN [--s-run RUN]`: a stored R run (any model, e.g. `training/evaluate_shapes_pair.py`'s
   eval-large-R), item by item: does the model's own walk imply the true answer, and does its conclusion follow
   its walk? Tells a reader that misperceives (walk wrong, conclusion follows it) from one that walks right and
   concludes otherwise; with an S run of the same model, crossed with whether S was right. No model is loaded.

    .venv/bin/python training/diagnose_shapes_pair.py --home build/shapes-eval --r-run RUN_ID --s-run RUN_ID

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

from train_shapes_pair import Batcher, Example, as_sample, make_example

from mai.evals.shapes import ShapesBenchmark
from mai.evals.shapes_world import (
    COLORS,
    GRID,
    SHAPES,
    SPLIT_SIZES,
    Question,
    Scene,
    recompute,
    split_items,
)
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


def walked_scene(text: str) -> Scene:
    """The grid an R answer's own walk describes; a cell named as no colour-and-shape of this world is empty."""
    cells = []
    for described in parse_walk(text) + [""] * (GRID * GRID):
        words = described.split()
        named = len(words) == 2 and words[0] in COLORS and words[1] in SHAPES
        cells.append((words[0], words[1]) if named else None)
    return tuple(cells[: GRID * GRID])


def walk_and_conclusion(text: str, scene: Scene, question: Question) -> tuple[bool, bool]:
    """(the answer the model's own walk implies is the true one, its conclusion is the answer its walk implies).
    The conclusion is read with the benchmark's own answer parser, as the scorer reads it."""
    try:
        implied: str | None = recompute(question, walked_scene(text)).answer
    except ValueError:  # an attribute walk giving the shape a colour none of the options names
        implied = None
    concluded = ShapesBenchmark().parse_answer(text, as_sample(question))
    return implied == question.answer, concluded is not None and concluded == implied


def stored_r_run(home: Path, r_run: str, s_run: str | None, split: str) -> dict[str, int]:
    """Counts of (S right/wrong,) R right/wrong, walk implies the truth or not, conclusion follows walk or not,
    over the items of a stored R run; sample ids are the split's row positions (`shapes-<index>`)."""
    from mai.storage.catalog import final_generations
    from mai.storage.paths import Home

    profile = ShapesBenchmark().profiles[0]  # the profile a run scores with (re-scoring adds others)
    rows = [(sample_id, text, score) for sample_id, kind, text, score in final_generations(Home.at(home), r_run, profile)
            if kind == "R"]
    if not rows:
        raise SystemExit(f"run {r_run!r} has no scored R generations in {home}")
    s_right = {sample_id: score for sample_id, _, _, score in final_generations(Home.at(home), s_run, profile)
               } if s_run else {}
    items = split_items(split, SPLIT_SIZES)
    counts: dict[str, int] = {}
    for sample_id, text, score in rows:
        scene, question = items[int(sample_id.rsplit("-", 1)[1])]
        truth, follows = walk_and_conclusion(text, scene, question)
        key = ", ".join([*([f"S {'right' if s_right.get(sample_id) == 1.0 else 'wrong'}"] if s_run else []),
                         f"R {'right' if score == 1.0 else 'wrong'}",
                         "walk implies the truth" if truth else "walk implies a wrong answer",
                         "conclusion follows the walk" if follows else "conclusion departs from the walk"])
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=Path, nargs="?", help="a model directory (weights, tokenizer, processor)")
    parser.add_argument("--kinds", default="S,R", help="prompt kinds for the image-reliance check")
    parser.add_argument("--items", type=int, default=96, help="validation items")
    parser.add_argument("--walk", action="store_true", help="also generate R walks and score them per cell")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--home", type=Path, help="with --r-run: the mai home holding the stored runs")
    parser.add_argument("--r-run", help="a stored R run id: walk vs conclusion, item by item (no model loaded)")
    parser.add_argument("--s-run", help="with --r-run: the same model's S run id, to cross with")
    parser.add_argument("--split", default="test", help="with --r-run: the shapes split the runs scored")
    args = parser.parse_args(argv)
    if args.r_run:
        if args.home is None:
            parser.error("--r-run needs --home (the mai home the run is stored in)")
        counts = stored_r_run(args.home, args.r_run, args.s_run, args.split)
        print(json.dumps({"r_run": args.r_run, "s_run": args.s_run, "items": sum(counts.values()), "counts": counts},
                         indent=1))
        return 0
    if args.checkpoint is None:
        parser.error("give a checkpoint directory, or --home and --r-run for a stored run")
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
