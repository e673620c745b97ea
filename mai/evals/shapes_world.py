"""The `shapes` world: seeded scenes of 3-12 coloured shapes on a 4x4 grid, questions in four families that mirror
the paper's benchmarks, and, for training, the answer each prompt kind should produce.

Families (the row's `category`):
- `presence`  yes/no object presence (POPE-like);
- `counting`  a number: shapes of one colour or of one kind (ChartQA-like, relaxed accuracy);
- `attribute` the colour of the one shape of a kind, options A-D (MMBench-like);
- `two_step`  how many more shapes of one colour than of another: two counts, then a subtraction, which
  step-by-step reasoning makes easy and a one-shot answer makes hard.

Images are 128x128 px: with Qwen3-VL's preprocessing (patch 16, merge 2) that is exactly 16 image tokens,
one per grid cell. Shapes are drawn at varied sizes, places, rotations and shades, under pixel noise and
grey clutter lines (`draw`), so that seeing them, not the bookkeeping after, is what a small model finds
hard. Reasoning traces walk the grid row by row, then conclude, then answer in `[[...]]`;
`corrupt_scene` makes plausible wrong reasoning (one cell misperceived) for teaching the large model to
check a smaller model's reference against the image instead of copying it.
"""

from __future__ import annotations

import hashlib
import io
import math
import random
from dataclasses import dataclass
from typing import Literal

from mai.evals.demo import (  # the demo's palette, shapes, option letters, rows
    COLORS,
    LETTERS,
    SHAPES,
    DemoRow,
)

GRID = 4
# shapes per scene: up to three quarters of the grid, so that a one-shot count over a dense scene is hard.
# With at most 7 a well-trained large model answers 99.6 % with the S prompt, leaving nothing for reasoning
# to add; on 6-12 shapes the same model answers 94 % and the small one 70 %.
OBJECTS_PER_SCENE = (3, 12)
CELL_PX = 32
IMAGE_PX = GRID * CELL_PX
# how shapes are drawn (see `draw`): size range in px, +- per colour channel, noise sigma, grey lines
SHAPE_PX = (10, 24)
COLOR_JITTER = 30
PIXEL_NOISE = 18.0
CLUTTER_LINES = 3
DRAWING = {"shape_px": list(SHAPE_PX), "color_jitter": COLOR_JITTER, "pixel_noise": PIXEL_NOISE,
           "clutter_lines": CLUTTER_LINES}  # what training logs record of the drawing
FAMILIES = ("presence", "counting", "attribute", "two_step")
SPLIT_SEEDS = {"train": 1, "validation": 2, "test": 3}
# the held-out sizes are fixed: the shipped models were trained on items that exclude exactly these
# test and validation items; the train split written to disk is the first items of the training stream
SPLIT_SIZES = {"test": 480, "validation": 240, "train": 4800}

Family = Literal["presence", "counting", "attribute", "two_step"]
Cell = tuple[str, str] | None  # (colour, shape) or empty
Scene = tuple[Cell, ...]        # GRID * GRID cells, row-major


@dataclass(frozen=True)
class Question:
    """One question about a scene: what the benchmark row holds, plus what a trace needs."""

    family: Family
    text: str
    options: tuple[str, ...]
    answer: str
    color: str = ""
    shape: str = ""
    other_color: str = ""


def random_scene(rng: random.Random) -> Scene:
    cells: list[Cell] = [None] * (GRID * GRID)
    for slot in rng.sample(range(GRID * GRID), rng.randint(*OBJECTS_PER_SCENE)):
        cells[slot] = (rng.choice(list(COLORS)), rng.choice(SHAPES))
    return tuple(cells)


def objects(scene: Scene) -> list[tuple[str, str]]:
    return [cell for cell in scene if cell is not None]


def count(scene: Scene, color: str = "", shape: str = "") -> int:
    return sum(1 for c, s in objects(scene) if (not color or c == color) and (not shape or s == shape))


def plural(shape: str) -> str:
    return shape + "s"


def make_question(scene: Scene, family: Family, rng: random.Random) -> Question | None:
    """A question of `family` about `scene`, or None when the scene cannot carry one (e.g. no unique shape)."""
    if family == "presence":
        present = rng.random() < 0.5
        pool = sorted(set(objects(scene))) if present else [
            (c, s) for c in COLORS for s in SHAPES if (c, s) not in set(objects(scene))]
        color, shape = rng.choice(pool)
        return Question("presence", f"Is there a {color} {shape} in the image?", (), "yes" if present else "no",
                        color=color, shape=shape)
    if family == "counting":
        if rng.random() < 0.5:
            color = rng.choice(list(COLORS))
            return Question("counting", f"How many {color} shapes are in the image?", (), str(count(scene, color)),
                            color=color)
        shape = rng.choice(SHAPES)
        return Question("counting", f"How many {plural(shape)} are in the image?", (), str(count(scene, shape=shape)),
                        shape=shape)
    if family == "attribute":
        unique = [s for s in SHAPES if count(scene, shape=s) == 1]
        if not unique:
            return None
        shape = rng.choice(unique)
        color = next(c for c, s in objects(scene) if s == shape)
        options = list(COLORS)
        rng.shuffle(options)
        return Question("attribute", f"What color is the {shape}?", tuple(options), LETTERS[options.index(color)],
                        color=color, shape=shape)
    first, second = rng.sample(list(COLORS), 2)
    if count(scene, first) < count(scene, second):
        first, second = second, first
    return Question("two_step", f"How many more {first} shapes than {second} shapes are in the image?", (),
                    str(count(scene, first) - count(scene, second)), color=first, other_color=second)


def recompute(question: Question, scene: Scene) -> Question:
    """The same question asked of another scene (the answer a misperceiving reasoner would reach)."""
    if question.family == "presence":
        answer = "yes" if (question.color, question.shape) in objects(scene) else "no"
    elif question.family == "counting":
        answer = str(count(scene, question.color, question.shape))
    elif question.family == "attribute":
        seen = [c for c, s in objects(scene) if s == question.shape]
        color = seen[0] if seen else question.options[0]
        answer = LETTERS[question.options.index(color)]
    else:
        answer = str(count(scene, question.color) - count(scene, question.other_color))
    return Question(question.family, question.text, question.options, answer, question.color, question.shape,
                    question.other_color)


def corrupt_scene(scene: Scene, rng: random.Random) -> Scene:
    """One cell misperceived: a shape recoloured, reshaped, missed, or imagined in an empty cell."""
    cells = list(scene)
    slot = rng.randrange(len(cells))
    cell = cells[slot]
    if cell is None:
        cells[slot] = (rng.choice(list(COLORS)), rng.choice(SHAPES))
    elif rng.random() < 0.25:
        cells[slot] = None
    elif rng.random() < 0.5:
        cells[slot] = (rng.choice([c for c in COLORS if c != cell[0]]), cell[1])
    else:
        cells[slot] = (cell[0], rng.choice([s for s in SHAPES if s != cell[1]]))
    return tuple(cells)


def one_cell_misperceptions(scene: Scene) -> list[Scene]:
    """Every scene `corrupt_scene` can produce: each shape missed, recoloured or reshaped, or one imagined in
    an empty cell."""
    seen = []
    for slot, cell in enumerate(scene):
        if cell is None:
            options: list[Cell] = [(color, shape) for color in COLORS for shape in SHAPES]
        else:
            options = [None, *[(c, cell[1]) for c in COLORS if c != cell[0]],
                       *[(cell[0], s) for s in SHAPES if s != cell[1]]]
        seen += [scene[:slot] + (option,) + scene[slot + 1 :] for option in options]
    return seen


def misleading_scene(question: Question, scene: Scene, rng: random.Random) -> Scene:
    """One cell misperceived so that the question's answer changes: a reference that reaches a wrong answer.
    A random misperception (`corrupt_scene`) changes the answer only about a quarter of the time (a recoloured
    cell rarely matters to a presence question), too seldom to teach a reader of references to check them.
    Where no single cell changes the answer (two red squares for "is there a red square?"), a random one."""
    wrong = [seen for seen in one_cell_misperceptions(scene) if recompute(question, seen).answer != question.answer]
    return rng.choice(wrong) if wrong else corrupt_scene(scene, rng)


# --- what each prompt kind should produce -------------------------------------------------------------

def grid_walk(scene: Scene) -> str:
    rows = []
    for row in range(GRID):
        cells = scene[row * GRID : (row + 1) * GRID]
        rows.append(f"Row {row + 1}: " + ", ".join(f"{c[0]} {c[1]}" if c else "empty" for c in cells) + ".")
    return "Let me look at each row of the grid.\n" + "\n".join(rows)


def _tally(scene: Scene, color: str = "", shape: str = "") -> str:
    """A running count over the matching shapes, in grid order: `red circle (1), red square (2)`."""
    found = [f"{c} {s} ({i})" for i, (c, s) in enumerate(
        [(c, s) for c, s in objects(scene) if (not color or c == color) and (not shape or s == shape)], start=1)]
    return ", ".join(found) if found else "none"


def _what(question: Question) -> str:
    return f"{question.color} shapes" if question.color else plural(question.shape)


def _attribute_by_options(question: Question, answer: str) -> str:
    """`The circle is green: option A is red, option B is green, so the answer is B`: the options read in order
    up to the match (R and E alike).

    A tiny model cannot look a colour up in the option list and return the letter before it (a trace that
    names the letter right after the colour, `green, which is option B`, leaves attribute near chance for R,
    E and RT). Reading the options
    aloud turns that lookup into copying the next line of the prompt, and stopping at the match puts the
    letter a fixed few tokens before the final answer, where it is easy to copy."""
    stop = LETTERS.index(answer)
    read = ", ".join(f"option {letter} is {text}" for letter, text in zip(LETTERS[: stop + 1], question.options))
    return f"The {question.shape} is {question.options[stop]}: {read}, so the answer is {answer}"


def _presence_by_colours(question: Question, scene: Scene) -> str:
    """`A red one? green no, yellow no, red yes`: the colours of the listed shapes of the asked kind, each
    checked against the asked colour, up to the first match (or `none` for an empty list).

    The list comes first, then the colour in two one-attribute steps, as counting does: finding the
    colour-and-shape pair in the walk at once is a conjunction the small model gets wrong on a quarter of the
    items. A single verdict over the list (`There is no yellow square`) still fails on long lists: on 6 of 30
    validation items of 3-12-shape scenes the small model's walk and list were right and the verdict was not,
    even for a one-item list naming the asked shape. Here every decision compares one colour with the asked
    colour a few tokens before it, as the attribute trace does with the options, which takes attribute from
    near chance to 100 %."""
    colours = [c for c, s in objects(scene) if s == question.shape]
    if not colours:
        return f"A {question.color} one? none"
    checked = colours[: colours.index(question.color) + 1] if question.color in colours else colours
    return f"A {question.color} one? " + ", ".join(f"{c} {'yes' if c == question.color else 'no'}" for c in checked)


def _conclusion(question: Question, scene: Scene) -> str:
    """What R says after the grid walk: the steps over what was seen in `scene`, then [[answer]]."""
    answer = recompute(question, scene).answer
    if question.family == "presence":
        return (f"The {plural(question.shape)}: {_tally(scene, shape=question.shape)}. "
                f"{_presence_by_colours(question, scene)}, so the answer is {answer}. [[{answer}]]")
    if question.family == "counting":
        return f"The {_what(question)}: {_tally(scene, question.color, question.shape)}. That makes {answer}. [[{answer}]]"
    if question.family == "attribute":
        return f"{_attribute_by_options(question, answer)}. [[{answer}]]"
    first, second = count(scene, question.color), count(scene, question.other_color)
    return (f"The {question.color} shapes: {_tally(scene, question.color)}. "
            f"The {question.other_color} shapes: {_tally(scene, question.other_color)}. "
            f"{first} - {second} = {answer}. [[{answer}]]")


def reasoning(question: Question, scene: Scene) -> str:
    """The R answer: walk the grid, conclude step by step, answer in [[...]]. `scene` is what was seen."""
    return reasoning_with_walk(question, scene, scene)


def reasoning_with_walk(question: Question, walked: Scene, concluded: Scene) -> str:
    """The grid walk of `walked`, then the conclusion reached over `concluded`: with two scenes, a reasoner
    whose walk is right and whose conclusion is not, the error a trained small model makes."""
    return f"{grid_walk(walked)}\n{_conclusion(question, concluded)}"


def explanation(question: Question, scene: Scene) -> str:
    """The E answer: one sentence of explanation, then [[answer]]."""
    answer = question.answer
    if question.family == "presence":
        there = "There is a" if answer == "yes" else "There is no"
        return f"{there} {question.color} {question.shape} in the image. [[{answer}]]"
    if question.family == "counting":
        return f"I count {answer} {_what(question)}. [[{answer}]]"
    if question.family == "attribute":
        return f"{_attribute_by_options(question, answer)}. [[{answer}]]"
    first, second = count(scene, question.color), count(scene, question.other_color)
    return (f"There are {first} {question.color} and {second} {question.other_color} shapes, "
            f"and {first} - {second} = {answer}. [[{answer}]]")


def short_answer(question: Question) -> str:
    """The S answer."""
    return f"[[{question.answer}]]"


# --- images and benchmark rows ------------------------------------------------------------------------

def draw(scene: Scene) -> bytes:
    """The scene as a PNG, drawn the way a camera would not draw it twice: each shape at its own size
    (SHAPE_PX), place inside its cell, rotation and shade of its colour (COLOR_JITTER), a few thin grey
    lines across the picture and pixel noise (PIXEL_NOISE). Seeded by the scene, so a scene always gives
    the same image.

    Why: on clean, centred, one-size shapes (the first two worlds) reading a cell is trivial, and a fully
    trained 1.2 M small model answered as well as the 5.7 M large one (S 98.3 vs 99.4), which left the
    cascade nothing to route. Varied small rotated shapes under noise make perception the hard part, as it
    is on real benchmarks, where a small vision tower's capacity shows."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = random.Random(int(hashlib.sha256(repr(scene).encode()).hexdigest()[:16], 16))
    image = Image.new("RGB", (IMAGE_PX, IMAGE_PX), (245, 245, 245))
    pen = ImageDraw.Draw(image)
    for _ in range(CLUTTER_LINES):
        grey = rng.randint(120, 190)
        pen.line([(rng.uniform(0, IMAGE_PX), rng.uniform(0, IMAGE_PX)),
                  (rng.uniform(0, IMAGE_PX), rng.uniform(0, IMAGE_PX))], fill=(grey, grey, grey), width=1)
    for slot, cell in enumerate(scene):
        if cell is None:
            continue
        radius = rng.uniform(*SHAPE_PX) / 2
        cx = (slot % GRID) * CELL_PX + rng.uniform(radius + 1, CELL_PX - radius - 1)
        cy = (slot // GRID) * CELL_PX + rng.uniform(radius + 1, CELL_PX - radius - 1)
        fill = tuple(max(0, min(255, v + rng.randint(-COLOR_JITTER, COLOR_JITTER))) for v in COLORS[cell[0]])
        angle = rng.uniform(0, 2 * math.pi)
        if cell[1] == "circle":
            pen.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=fill)
        else:
            corners, reach = (4, radius) if cell[1] == "square" else (3, radius * 1.1)
            pen.polygon([(cx + reach * math.cos(angle + 2 * math.pi * k / corners),
                          cy + reach * math.sin(angle + 2 * math.pi * k / corners)) for k in range(corners)], fill=fill)
    pixels = np.asarray(image, dtype=np.float32)
    noisy = pixels + np.random.default_rng(rng.getrandbits(32)).normal(0.0, PIXEL_NOISE, pixels.shape)  # float64
    buffer = io.BytesIO()
    Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def item_key(scene: Scene, question: Question) -> str:
    """What makes two items the same item: splits never share one."""
    return hashlib.sha256(repr((scene, question.text, question.options)).encode()).hexdigest()


def generate_items(split: str, n: int, exclude: frozenset[str] = frozenset(), seed: int | None = None
                   ) -> list[tuple[Scene, Question]]:
    """`n` (scene, question) items, families in rotation, deterministic for the split (or `seed`)."""
    rng = random.Random(SPLIT_SEEDS[split] if seed is None else seed)
    items: list[tuple[Scene, Question]] = []
    seen = set(exclude)
    while len(items) < n:
        scene = random_scene(rng)
        question = make_question(scene, FAMILIES[len(items) % len(FAMILIES)], rng)  # type: ignore[arg-type]
        if question is None or item_key(scene, question) in seen:
            continue
        seen.add(item_key(scene, question))
        items.append((scene, question))
    return items


SPLIT_ORDER = ("test", "validation", "train")


def split_items(split: str, sizes: dict[str, int]) -> list[tuple[Scene, Question]]:
    """The items of a split. Splits are made in a fixed order (test, validation, train), each excluding
    every item of the splits before it, so no item is in two splits."""
    exclude: frozenset[str] = frozenset()
    for name in SPLIT_ORDER:
        items = generate_items(name, sizes[name], exclude)
        if name == split:
            return items
        exclude = exclude | {item_key(s, q) for s, q in items}
    raise ValueError(f"unknown split '{split}': choose one of {list(SPLIT_ORDER)}")


def held_out_keys(sizes: dict[str, int]) -> frozenset[str]:
    """Keys of the validation and test items, which the training stream must never produce."""
    return frozenset(item_key(s, q) for split in ("test", "validation") for s, q in split_items(split, sizes))


def world_fingerprint(sizes: dict[str, int]) -> str:
    """What materialized splits depend on: the world's constants, the split sizes, and the first test items
    (scenes, question texts, options, answers) and image they produce, so that a change to the generator's
    logic shows even where no constant changed. Splits written by another world are rebuilt, never reused:
    a home's splits from an older world would otherwise be run, and compared with a baseline, as the current
    world's items under the same sample ids."""
    probe = generate_items("test", 40)
    digest = hashlib.sha256(repr((GRID, OBJECTS_PER_SCENE, CELL_PX, DRAWING, FAMILIES, SPLIT_SEEDS,
                                  sorted(sizes.items()), COLORS, SHAPES, LETTERS,
                                  [(item_key(s, q), q.answer) for s, q in probe])).encode())
    digest.update(draw(probe[0][0]))
    return digest.hexdigest()[:16]


def to_row(index: int, scene: Scene, question: Question) -> DemoRow:
    """A row in the hub schema the loaders read (MMBench columns; options empty for open questions)."""
    options = dict(zip(LETTERS, question.options))
    # keys in the order the rows always had (the column order of the written Parquet file)
    return DemoRow(index=index, question=question.text, hint=None, A=options.get("A"), B=options.get("B"),
                   C=options.get("C"), D=options.get("D"), answer=question.answer, category=question.family,
                   image={"bytes": draw(scene), "path": None})
