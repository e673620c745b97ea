"""Small shards of each paper benchmark in its hub column schema (with the `datasets` feature metadata,
as the hub's Parquet files carry it), written by the tests and loaded through the production loader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets

from mai.evals.demo import generate_demo_rows

Value, Image = datasets.Value, datasets.Image


def _images(n: int) -> list[dict[str, Any]]:
    return [row["image"] for row in generate_demo_rows(n, seed=11)]


def pope_rows(n: int) -> tuple[list[dict[str, Any]], datasets.Features]:
    images = _images(n)
    rows = [{"id": str(i), "question_id": str(100 + i), "question": f"Is there a {c} in the image?",
             "answer": "yes" if i % 2 else "no", "image_source": f"COCO_{i}", "image": images[i],
             "category": ("adversarial", "popular", "random")[i % 3]}
            for i, c in enumerate(["cat", "dog", "car", "chair", "person", "bottle"][:n])]
    features = datasets.Features({"id": Value("string"), "question_id": Value("string"), "question": Value("string"),
                                  "answer": Value("string"), "image_source": Value("string"), "image": Image(),
                                  "category": Value("string")})
    return rows, features


def chartqa_rows(n: int) -> tuple[list[dict[str, Any]], datasets.Features]:
    images = _images(n)
    rows = [{"type": "human_test" if i % 2 else "augmented_test", "question": f"What is the value of bar {i}?",
             "answer": str(10 * i), "image": images[i]} for i in range(n)]
    features = datasets.Features({"type": Value("string"), "question": Value("string"), "answer": Value("string"),
                                  "image": Image()})
    return rows, features


def infovqa_rows(n: int) -> tuple[list[dict[str, Any]], datasets.Features]:
    images = _images(n)
    rows = [{"questionId": str(5000 + i), "question": f"How many people are in region {i}?",
             "answers": [f"{i} million", f"{i}m"], "answer_type": ["single span"], "image": images[i],
             "image_url": f"https://example.invalid/{i}.png", "operation/reasoning": None, "ocr": "",
             "data_split": "val"} for i in range(n)]
    features = datasets.Features({"questionId": Value("string"), "question": Value("string"),
                                  "answers": datasets.Sequence(Value("string")),
                                  "answer_type": datasets.Sequence(Value("string")), "image": Image(),
                                  "image_url": Value("string"), "operation/reasoning": datasets.Sequence(Value("string")),
                                  "ocr": Value("string"), "data_split": Value("string")})
    return rows, features


def mmbench_rows(n: int) -> tuple[list[dict[str, Any]], datasets.Features]:
    """n // 3 questions, each with three circular copies (options rotated, index + k * 1e6)."""
    images = _images(n)
    rows = []
    for q in range(n // 3):
        options = ["red", "green", "blue", None if q % 2 else "yellow"]
        present = [o for o in options if o]
        for k in range(3):
            rotated = present[k:] + present[:k]
            letters = dict(zip("ABCD", rotated + [None] * (4 - len(rotated))))
            rows.append({"index": q + k * 1_000_000, "question": f"What color is shape {q}?",
                         "hint": "Look at the left half." if q % 3 == 0 else None, **letters,
                         "answer": "ABCD"[rotated.index("red")], "category": ("color", "count")[q % 2],
                         "L2-category": "perception", "source": "fixture", "split": "dev", "comment": None,
                         "image": images[q]})
    features = datasets.Features({"index": Value("int64"), "question": Value("string"), "hint": Value("string"),
                                  **{c: Value("string") for c in "ABCD"}, "answer": Value("string"),
                                  "category": Value("string"), "L2-category": Value("string"),
                                  "source": Value("string"), "split": Value("string"), "comment": Value("string"),
                                  "image": Image()})
    return rows, features


def mmmu_rows(n: int) -> tuple[list[dict[str, Any]], datasets.Features]:
    images = _images(n)
    rows = []
    for i in range(n):
        subject = ("Art", "Economics", "Math")[i % 3]
        is_open = i % 3 == 2
        rows.append({"id": f"validation_{subject}_{i + 1}", "question": f"<image 1> Question {i} about the figure?",
                     "options": "[]" if is_open else "['red', 'green', 'blue', 'yellow']", "explanation": "",
                     "image_1": images[i], **{f"image_{k}": None for k in range(2, 8)}, "img_type": "['Diagrams']",
                     "answer": str(i) if is_open else "ABCD"[i % 4], "topic_difficulty": "Easy",
                     "question_type": "open" if is_open else "multiple-choice", "subfield": "Fixture"})
    features = datasets.Features({"id": Value("string"), "question": Value("string"), "options": Value("string"),
                                  "explanation": Value("string"), **{f"image_{k}": Image() for k in range(1, 8)},
                                  "img_type": Value("string"), "answer": Value("string"),
                                  "topic_difficulty": Value("string"), "question_type": Value("string"),
                                  "subfield": Value("string")})
    return rows, features


def realworldqa_rows(n: int) -> tuple[list[dict[str, Any]], datasets.Features]:
    images = _images(n)
    rows = []
    for i in range(n):
        if i % 2:
            question = ("Which direction is the arrow pointing?\nA. Left\nB. Right\nC. Up\n"
                        "Please answer directly with only the letter of the correct option and nothing else.")
            answer = "ABC"[i % 3]
        else:
            question = "How many shapes are there? Please answer directly with a single word or number."
            answer = str(i % 4)
        rows.append({"image": images[i], "question": question, "answer": answer})
    features = datasets.Features({"image": Image(), "question": Value("string"), "answer": Value("string")})
    return rows, features


FIXTURES: dict[str, tuple[Callable[[int], tuple[list[dict[str, Any]], datasets.Features]], str]] = {
    "pope": (pope_rows, "test-00000-of-00001.parquet"),
    "chartqa": (chartqa_rows, "test-00000-of-00001.parquet"),
    "infovqa": (infovqa_rows, "validation-00000-of-00001.parquet"),
    "mmbench": (mmbench_rows, "dev-00000-of-00001.parquet"),
    "mmmu": (mmmu_rows, "validation-00000-of-00001.parquet"),
    "realworldqa": (realworldqa_rows, "test-00000-of-00001.parquet"),
}


def write_fixture(benchmark: str, directory: Path, n: int = 6, mutate: Callable[[list[dict[str, Any]]], None] | None = None
                  ) -> Path:
    """A hub-layout copy (`<split>-00000-of-00001.parquet`) of `n` rows; `mutate` may break rows."""
    make, file_name = FIXTURES[benchmark]
    rows, features = make(n)
    if mutate is not None:
        mutate(rows)
    directory.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(directory / file_name))
    return directory


def fixture_dataset(benchmark: str, n: int = 6) -> datasets.Dataset:
    make, _ = FIXTURES[benchmark]
    rows, features = make(n)
    return datasets.Dataset.from_list(rows, features=features)
