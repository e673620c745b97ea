"""`demo`: a generated, seeded benchmark of shape images with yes/no and multiple-choice questions.

Rows use the MMBench-style hub schema (`index, question, hint, A..D, answer, category, image`); a yes/no
row has no options and the answer `yes`/`no` (POPE-style). It goes through the same loading code as the
real benchmarks (a local Parquet copy), so the demo exercises the real path end to end.
Scoring: exact match after parsing; agreement for mutual verification: equal parsed answers.
"""

from __future__ import annotations

import io
import random
import re
from typing import TypedDict

from mai.answers import answer_span, normalize
from mai.evals.base import (
    BadRow,
    HubRow,
    ImageCell,
    Metric,
    RowFields,
    ScoredSample,
    image_bytes,
    row_id,
)
from mai.evals.common import HubBenchmark, mean_accuracy, optional_text, text_field
from mai.types import AnswerStyle, Sample

LETTERS = ("A", "B", "C", "D")
COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}
SHAPES = ("circle", "square", "triangle")
IMAGE_SIZE = 64
_YES_NO = re.compile(r"\b(yes|no)\b")
_LETTER = re.compile(r"(?:^|[\s(\[])([A-D])(?:$|[\s).:,\]])")


class DemoRow(TypedDict):
    """A row the project writes itself, in the MMBench-style hub schema of `demo` and `shapes` (the Parquet
    features of `mai.run.assets.write_hub_parquet`); a question without options has None in A-D."""

    A: str | None
    B: str | None
    C: str | None
    D: str | None
    question: str
    answer: str
    index: int
    category: str
    hint: str | None
    image: ImageCell


class DemoBenchmark(HubBenchmark):
    name = "demo"
    version = "1"
    agreement_rule = "exact_match_after_parsing"
    required_columns = ("index", "question", "answer", "category", "image")
    id_column = "index"
    profiles = ("exact-match",)

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        options = tuple(str(row[k]) for k in LETTERS if row.get(k) not in (None, ""))
        answer = text_field(row, "answer").strip()
        if options and answer not in LETTERS[: len(options)]:
            raise BadRow(f"answer '{answer}' is not one of the option letters {LETTERS[: len(options)]}")
        if not options and answer.lower() not in ("yes", "no"):  # parsing reads only yes/no: anything else scores 0
            raise BadRow(f"a yes/no answer must be yes or no, got '{answer[:40]}'")
        return RowFields(
            sample_id=row_id(self.name, self.id_column, row, index),
            question=text_field(row, "question"),
            options=options,
            answer=answer,
            images=(image_bytes(row.get("image"), "image"),) if with_images else (),
            category=str(row.get("category") or "none"),
            meta=(("hint", hint),) if (hint := optional_text(row, "hint").strip()) else (),
        )

    def answer_style(self, sample: Sample) -> AnswerStyle:
        return "letter" if sample.options else "phrase"

    def rt_template(self, sample: Sample) -> str:
        """Yes/no questions take the POPE template (prompt 1), multiple choice the MMBench one (prompt 2)."""
        return "rt_reference" if sample.options else "rt_s2_style"

    def format_question(self, sample: Sample) -> str:
        """MMBench layout: the hint (a row's optional `hint` column) before the question, then one `X. option` line
        per option."""
        hint = sample.get("hint")
        lines = [f"{hint} {sample.question}" if hint else sample.question]
        lines += [f"{letter}. {text}" for letter, text in zip(LETTERS, sample.options)]
        return "\n".join(lines)

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        span = answer_span(text)
        if not sample.options:
            match = _YES_NO.search(span.lower())
            return match.group(1) if match else None
        return parse_letter(span, sample.options)

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        reference = sample.answer if sample.options else sample.answer.lower()
        return 1.0 if parsed is not None and parsed == reference else 0.0

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        return mean_accuracy(scored)


def parse_letter(span: str, options: tuple[str, ...]) -> str | None:
    """A bare letter, a letter followed by punctuation, or the text of exactly one option."""
    valid = LETTERS[: len(options)]
    match = _LETTER.search(span.strip())
    if match and match.group(1) in valid:
        return match.group(1)
    said = normalize(span)
    hits = [letter for letter, option in zip(valid, options) if normalize(option) == said]
    return hits[0] if len(hits) == 1 else None


def generate_demo_rows(n: int, seed: int) -> list[DemoRow]:
    """`n` rows in the hub schema, deterministic for a seed. Question families rotate so every
    shard holds both answer styles."""
    rng = random.Random(seed)
    rows = []
    for index in range(n):
        shapes = [(rng.choice(SHAPES), rng.choice(list(COLORS))) for _ in range(rng.randint(1, 3))]
        family = ("presence", "attribute", "counting")[index % 3]
        question, answer, options = _question_for(family, shapes, rng)
        letters = dict(zip(LETTERS, options))
        # keys in the order the rows always had: it is the column order of the Parquet file the demo data is
        # written to, whose bytes are the dataset's fingerprint
        rows.append(DemoRow(A=letters.get("A"), B=letters.get("B"), C=letters.get("C"), D=letters.get("D"),
                            question=question, answer=answer, index=index, category=family, hint=None,
                            image={"bytes": _draw(shapes, rng), "path": None}))
    return rows


def _question_for(family: str, shapes: list[tuple[str, str]], rng: random.Random) -> tuple[str, str, tuple[str, ...]]:
    """(question, answer, options) of one row; a yes/no question has no options."""
    if family == "presence":
        shape, color = rng.choice(shapes) if rng.random() < 0.5 else (rng.choice(SHAPES), rng.choice(list(COLORS)))
        return f"Is there a {color} {shape} in the image?", "yes" if (shape, color) in shapes else "no", ()
    if family == "attribute":
        shape, color = shapes[0]
        colors = list(COLORS)
        rng.shuffle(colors)
        return f"What color is the {shape}?", LETTERS[colors.index(color)], tuple(colors)
    return "How many shapes are in the image?", LETTERS[len(shapes) - 1], ("1", "2", "3", "4")


def _draw(shapes: list[tuple[str, str]], rng: random.Random) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (245, 245, 245))
    draw = ImageDraw.Draw(image)
    cell = IMAGE_SIZE // 2
    for slot, (shape, color) in zip(rng.sample(range(4), len(shapes)), shapes):
        x0, y0 = (slot % 2) * cell + 4, (slot // 2) * cell + 4
        box = (x0, y0, x0 + cell - 8, y0 + cell - 8)
        if shape == "circle":
            draw.ellipse(box, fill=COLORS[color])
        elif shape == "square":
            draw.rectangle(box, fill=COLORS[color])
        else:
            draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], fill=COLORS[color])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
