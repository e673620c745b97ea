"""Record the small model's own R reasoning on the shapes world's train split, as RT training references.

    .venv/bin/python training/record_small_references.py --models-dir mai/assets/models --home build/train-refs \
        --out build/small-references.jsonl

The synthetic references of `train_shapes_pair.make_example` misperceive one cell (or conclude wrongly over a
true walk). The small model errs otherwise: it misnames many shapes in its walk yet often concludes right
anyway, and its wrong conclusions follow its own blind spots. A large model trained on synthetic references
alone learns to copy the reference's conclusion (measured: Full RT right exactly where small R was right, all
but 4 of 480 items). This runs the pipeline itself (`mode single`, small model, R prompt, the shapes token
budget) on the train split (the first items of the training pool, never validation or test), so every
generation lands in the store and is cached, then writes one JSON line per item: `key` (the world's item key,
which `train_shapes_pair.py --recorded-references` maps back to its training item), `reference` (the text),
`right` (whether the small model's answer was right; for the summary only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mai.config import SHAPES_LARGE, SHAPES_MAX_NEW_TOKENS, SHAPES_SMALL, RunConfig
from mai.evals.shapes import ShapesBenchmark
from mai.evals.shapes_world import SPLIT_SIZES, item_key, split_items

# quiet, offline-friendly Prefect defaults for an embedded run, as `mai` sets them (mai.api leaves the
# environment alone); the user's env wins
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

RUN_NAME = "small-R-train"


def record(models_dir: Path, home: str, limit: int | None) -> list[dict[str, object]]:
    """Run small R on the train split through the pipeline, then read its texts and scores from the store."""
    from mai.storage.catalog import final_generations
    from mai.storage.paths import Home

    from mai import api

    manifest = api.run(RunConfig(benchmark="shapes", split="train", limit=limit, home=home, mode="single",
                                single_model="small", single_prompt="R", max_new_tokens=SHAPES_MAX_NEW_TOKENS,
                                small_model=str(models_dir / SHAPES_SMALL),
                                large_model=str(models_dir / SHAPES_LARGE), run_name=RUN_NAME))
    # the profile the run itself scored with
    rows = final_generations(Home.at(Path(home)), manifest["run_id"], ShapesBenchmark().profiles[0])
    items = split_items("train", SPLIT_SIZES)
    out = []
    for sample_id, _, text, score in sorted(rows, key=lambda row: int(row[0].rsplit("-", 1)[1])):
        scene, question = items[int(sample_id.rsplit("-", 1)[1])]  # the shapes loader's ids: shapes-<row index>
        out.append({"key": item_key(scene, question), "reference": text, "right": score == 1.0})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models-dir", type=Path, default=Path("mai/assets/models"))
    parser.add_argument("--home", default="build/train-refs")
    parser.add_argument("--out", type=Path, default=Path("build/small-references.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="first N train items (default: all)")
    args = parser.parse_args(argv)
    rows = record(args.models_dir, args.home, args.limit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    right = sum(bool(row["right"]) for row in rows)
    print(f"{len(rows)} references -> {args.out}; small R right on {right} ({100 * right / max(len(rows), 1):.1f} %)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
