"""Image preprocessing with and without the per-process cache of processed images (mai/backends/processor.py).

A MAI run processes each sample's image for every stage and model that sees it (small S, large S, small R, large
RT): without the cache a 480-sample run with 117 R and 76 RT samples resizes and patches 1,153 images, with it 480.
This measures one batch of random RGB images of a given size through the shipped small model's image processor:
the processor's own batch call (what every stage did without the cache), the first cached call (a miss per image)
and the second (hits); and checks that all three give identical model inputs.

Run: `.venv/bin/python benchmarks/image_cache.py [--images 32] [--width 1024] [--height 768]`. Results:
docs/benchmarks.md, "Cascade speed".
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--height", type=int, default=768)
    args = parser.parse_args()

    import numpy as np
    import torch
    from PIL import Image

    from mai.backends.processor import ImageOnlyProcessor
    from mai.backends.transformers_backend import TransformersEngine
    from mai.config import SHAPES_SMALL, resolve_model
    from mai.storage.paths import Home

    with tempfile.TemporaryDirectory(prefix="mai-image-cache-") as directory:
        home = Home.at(Path(directory) / "home")
        engine = TransformersEngine(resolve_model(SHAPES_SMALL, "main", "float32", home.models))
        processor = engine.load().processor  # the engine's own processor, as a run uses it
        if not isinstance(processor, ImageOnlyProcessor):
            raise SystemExit("the stock processor loaded (torchvision present): the cache applies to the image-only "
                             "processor")
        rng = np.random.default_rng(0)
        paths = []
        for index in range(args.images):
            path = Path(directory) / f"{index}.png"
            Image.fromarray(rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)).save(path)
            paths.append(str(path))
        texts = ["<|vision_start|><|image_pad|><|vision_end|>What is shown?"] * args.images

        started = time.perf_counter()
        images = [[Image.open(p).convert("RGB")] for p in paths]
        batch = processor(text=texts, images=images, return_tensors="pt", padding=True)
        batch_s = time.perf_counter() - started
        started = time.perf_counter()
        processor.from_files(texts, [(p,) for p in paths])
        miss_s = time.perf_counter() - started
        started = time.perf_counter()
        cached = processor.from_files(texts, [(p,) for p in paths])
        hit_s = time.perf_counter() - started
    identical = all(torch.equal(batch[key], cached[key]) for key in ("input_ids", "pixel_values", "image_grid_thw"))
    per = 1000 / args.images
    print(f"{args.images} images {args.width}x{args.height} -> pixel_values {tuple(batch['pixel_values'].shape)}: "
          f"processor batch {batch_s * per:.1f} ms/image, first cached call {miss_s * per:.1f} ms/image, "
          f"cached {hit_s * per:.2f} ms/image; identical inputs: {identical}")
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
