"""Writes colours.tsv: a tiny benchmark in VLMEvalKit's custom-dataset TSV format (what many groups keep their
private benchmarks in), for `bench.yaml` beside it. Eight rows: a coloured square (a base64 PNG), the question
"What colour is the square?", options A-D, the answer letter, a hint on odd rows, a category (warm / cool). Row 7
repeats row 3's image by its index, as VLMEvalKit writes a repeated image.

    python examples/colours/make_colours_tsv.py      # deterministic: the same file every time
"""

from __future__ import annotations

import base64
import csv
import io
from pathlib import Path

from PIL import Image

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220), "yellow": (240, 220, 40)}
HEADER = ["index", "image", "question", "hint", "A", "B", "C", "D", "answer", "category"]


def square(rgb: tuple[int, int, int], size: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), rgb).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def rows() -> list[list[str]]:
    names = list(COLOURS)
    out = []
    for index in range(8):
        name = names[index % 4]
        image = "3" if index == 7 else square(COLOURS[name], 48 if index < 4 else 64)
        hint = "The square fills the whole picture." if index % 2 else ""
        category = "warm" if name in ("red", "yellow") else "cool"
        out.append([str(index), image, "What colour is the square?", hint, *names, "ABCD"[index % 4], category])
    return out


def main() -> None:
    target = Path(__file__).resolve().parent / "colours.tsv"
    with target.open("w", newline="") as handle:
        csv.writer(handle, delimiter="\t", lineterminator="\n").writerows([HEADER, *rows()])
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
