"""What naming every file a sample reads costs (issue 59; results in docs/benchmarks.md "Files a sample reads").

A spec benchmark whose JSONL names N distinct PNG images by path (default 10,000, 64 x 64 pixels each):
  first       materialising the set: reading the rows and every image, hashing each image as it is read
  reuse       materialising it again, nothing changed: a stored set found, each recorded image checked by its size
              and times (the store's fingerprint cache), no image read
  cold        the same check with the cache dropped: every recorded image read and hashed again
  one change  one image replaced in place: the set is read again (a new set, a new fingerprint)

Run: `.venv/bin/python benchmarks/files_read_cost.py [--images 10000] [--dir DIR]`. No model, no Prefect.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import tempfile
import time
from pathlib import Path

from PIL import Image

from mai.evals.fingerprint_cache import FingerprintCache
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS, resolve_source
from mai.evals.registry import register_spec
from mai.evals.spec import load_spec, spec_split
from mai.pipeline import Materialised
from mai.storage.materialise import materialise_samples
from mai.storage.paths import Home

LOG = logging.getLogger("files-read-cost")


def build(folder: Path, count: int) -> Path:
    """N distinct PNGs (one pixel differs) and a yes/no JSONL naming them; returns the spec file."""
    images = folder / "images"
    images.mkdir(parents=True)
    rows = []
    for index in range(count):
        picture = Image.new("RGB", (64, 64), (index % 256, (index // 256) % 256, 90))
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        (images / f"{index:05d}.png").write_bytes(buffer.getvalue())
        rows.append({"id": f"q{index}", "image": f"images/{index:05d}.png", "question": "Is it red?", "answer": "no"})
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = folder / "bench.yaml"
    spec.write_text("name: files-read-cost\ndata: rows.jsonl\nformat: jsonl\nanswer_kind: yes_no\ncolumns: {id: id}\n")
    return spec


def timed_materialise(home: Home, spec_file: Path) -> tuple[float, Materialised]:
    spec = load_spec(spec_file)
    register_spec(spec)
    started = time.perf_counter()
    source = resolve_source(spec.data, spec_split(spec), None, None, FingerprintCache(home.fingerprints))
    done = materialise_samples(home, spec.name, source, 2, None, DEFAULT_MAX_IMAGE_PIXELS, LOG)
    return time.perf_counter() - started, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, help="a scratch folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        root = Path(scratch)
        spec = build(root / "bench", args.images)
        home = Home.at(root / "store")
        home.datasets.mkdir(parents=True)
        first_s, first = timed_materialise(home, spec)
        time.sleep(2.1)  # past the fingerprint cache's racy window: files written just now are hashed, not trusted
        warm_s, warm = timed_materialise(home, spec)  # hashes once more, then keeps the images' stats
        reuse_s, reused = timed_materialise(home, spec)
        home.fingerprints.unlink()
        cold_s, _ = timed_materialise(home, spec)
        image = root / "bench" / "images" / "00000.png"
        stat = image.stat()
        image.write_bytes((root / "bench" / "images" / "00001.png").read_bytes())
        os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        changed_s, changed = timed_materialise(home, spec)
    assert reused.source == first.source == warm.source and changed.source.fingerprint != first.source.fingerprint
    print(json.dumps({"images": args.images, "first_s": round(first_s, 2), "reuse_s": round(reuse_s, 3),
                      "cold_check_s": round(cold_s, 2), "warm_first_check_s": round(warm_s, 2),
                      "one_image_replaced_s": round(changed_s, 2), "load_1m": os.getloadavg()[0]}, indent=1))


if __name__ == "__main__":
    main()
