"""The shapes world: deterministic disjoint splits, answers true to the scene, traces that parse to the answer
under the benchmark's own parser, scoring per family, and 16 image tokens per image."""

from __future__ import annotations

import io
import random

import pytest

from mai.evals.base import BadRow
from mai.evals.shapes import ShapesBenchmark
from mai.evals.shapes_world import (
    CELL_PX,
    COLORS,
    FAMILIES,
    GRID,
    OBJECTS_PER_SCENE,
    SPLIT_SIZES,
    corrupt_scene,
    draw,
    explanation,
    grid_walk,
    item_key,
    misleading_scene,
    objects,
    one_cell_misperceptions,
    reasoning,
    reasoning_with_walk,
    recompute,
    short_answer,
    split_items,
    to_row,
)
from mai.types import Sample

SIZES = {"test": 40, "validation": 24, "train": 200}
BENCHMARK = ShapesBenchmark()


def sample_of(row: dict, index: int = 0) -> Sample:
    fields = BENCHMARK.parse_row(row, index, with_images=False)
    sample = Sample(sample_id=fields.sample_id, benchmark="shapes", question=fields.question, options=fields.options,
                    answer=fields.answer, image_paths=(), image_sha256=(), category=fields.category, content_hash="",
                    answer_style="phrase")
    return Sample(**{**sample.__dict__, "answer_style": BENCHMARK.answer_style(sample)})


def test_splits_are_deterministic_and_disjoint() -> None:
    splits = {name: split_items(name, SIZES) for name in SIZES}
    assert splits["test"] == split_items("test", SIZES)
    keys = {name: {item_key(s, q) for s, q in items} for name, items in splits.items()}
    assert all(len(keys[name]) == SIZES[name] for name in SIZES)  # no duplicates within a split
    assert not keys["test"] & keys["validation"] and not keys["train"] & (keys["test"] | keys["validation"])
    # the held-out splits do not depend on how much training data is asked for
    assert split_items("test", {**SIZES, "train": 5}) == splits["test"]
    assert {q.family for _, q in splits["test"]} == set(FAMILIES)
    assert SPLIT_SIZES["test"] >= 400  # enough items for per-family accuracies worth reporting


def test_scenes_span_sparse_to_dense_within_the_stated_range() -> None:
    sizes = [len(objects(scene)) for scene, _ in split_items("test", SPLIT_SIZES)]
    low, high = OBJECTS_PER_SCENE
    assert low <= min(sizes) and max(sizes) <= high
    # the dense scenes that make a one-shot count hard are a real share of the test split, not a rarity
    assert sum(size > 7 for size in sizes) >= len(sizes) // 3


def test_answers_are_true_to_the_scene_and_every_trace_parses_to_them() -> None:
    for index, (scene, question) in enumerate(split_items("validation", SIZES)):
        assert recompute(question, scene).answer == question.answer
        sample = sample_of(to_row(index, scene, question))
        for text in (reasoning(question, scene), explanation(question, scene), short_answer(question)):
            parsed = BENCHMARK.parse_answer(text, sample)
            assert BENCHMARK.score(parsed, sample) == 1.0, (question, text)
        assert reasoning(question, scene).count("Row ") == 4  # the grid walk, row by row


def test_a_corrupted_scene_misperceives_exactly_one_cell() -> None:
    rng = random.Random(0)
    changed_answers = 0
    for scene, question in split_items("validation", SIZES):
        seen = corrupt_scene(scene, rng)
        assert sum(a != b for a, b in zip(scene, seen)) == 1
        changed_answers += recompute(question, seen).answer != question.answer
    assert 0 < changed_answers < SIZES["validation"]  # sometimes the misperception matters, sometimes not


def test_each_family_is_scored_as_the_benchmark_it_mirrors() -> None:
    presence = sample_of({"index": 1, "question": "Is there a red circle in the image?", "answer": "yes",
                          "category": "presence"})
    assert BENCHMARK.parse_answer("[[yes]]", presence) == "yes"
    assert BENCHMARK.parse_answer("[[Yes, there is]]", presence) is None  # POPE: exact yes/no only
    counting = sample_of({"index": 2, "question": "How many circles are in the image?", "answer": "3",
                          "category": "counting"})
    assert BENCHMARK.score(BENCHMARK.parse_answer("3", counting), counting) == 1.0  # S2: a bare answer
    assert BENCHMARK.score("3.0", counting) == 1.0 and BENCHMARK.score("4", counting) == 0.0
    assert BENCHMARK.agree("2", "2.0", counting) and not BENCHMARK.agree("2", None, counting)
    attribute = sample_of({"index": 3, "question": "What color is the square?", "A": "red", "B": "green",
                           "C": "blue", "D": "yellow", "answer": "C", "category": "attribute"})
    assert attribute.answer_style == "letter" and BENCHMARK.rt_template(attribute) == "rt_reference"
    assert BENCHMARK.rt_template(counting) == "rt_s2_style"
    assert BENCHMARK.parse_answer("option C [[C]]", attribute) == "C"
    assert BENCHMARK.format_question(attribute).endswith("C. blue\nD. yellow")


@pytest.mark.parametrize("row, reason", [
    ({"index": 1, "question": "q?", "answer": "maybe", "category": "presence"}, "yes or no"),
    ({"index": 1, "question": "q?", "answer": "two", "category": "counting"}, "whole number"),
    ({"index": 1, "question": "q?", "answer": "x", "category": "colour"}, "category"),
    ({"index": 1, "question": "q?", "A": "red", "B": "blue", "answer": "D", "category": "attribute"}, "letters"),
])
def test_bad_rows_are_rejected_with_the_reason(row: dict, reason: str) -> None:
    with pytest.raises(BadRow, match=reason):
        BENCHMARK.parse_row(row, 0, with_images=False)


def test_an_image_is_one_image_token_per_grid_cell() -> None:
    from PIL import Image

    from mai.backends.tiny_models import build_image_processor

    scene, _ = split_items("test", SIZES)[0]
    image = Image.open(io.BytesIO(draw(scene))).convert("RGB")
    processor = build_image_processor(128 * 128, 128 * 128)
    grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    assert int(grid.prod()) // processor.merge_size**2 == 16


def _coloured_pixels(image, slot: int) -> list[tuple[int, int, tuple[int, int, int]]]:
    """(x, y, rgb) of the clearly coloured pixels of one grid cell: grey clutter and background noise have a
    spread between channels far below 80, every palette colour far above."""
    left, top = (slot % GRID) * CELL_PX, (slot // GRID) * CELL_PX
    pixels = [(x, y, image.getpixel((x, y))) for x in range(left, left + CELL_PX) for y in range(top, top + CELL_PX)]
    return [(x, y, p) for x, y, p in pixels if max(p) - min(p) > 80]


def _drawn(scene):
    from PIL import Image

    return Image.open(io.BytesIO(draw(scene))).convert("RGB")


def test_each_shape_is_drawn_in_its_cell_in_its_colour_under_clutter_and_a_scene_draws_the_same_twice() -> None:
    checked = 0
    for scene, _ in split_items("test", SIZES)[:12]:
        assert draw(scene) == draw(scene)
        image = _drawn(scene)
        for slot, cell in enumerate(scene):
            coloured = [p for _, _, p in _coloured_pixels(image, slot)]
            if cell is None:
                assert len(coloured) <= 5, f"empty cell {slot} shows {len(coloured)} coloured pixels"
                continue
            assert len(coloured) >= 30, f"the {cell} in cell {slot} shows only {len(coloured)} coloured pixels"
            mean = [sum(p[c] for p in coloured) / len(coloured) for c in range(3)]
            nearest = min(COLORS, key=lambda name: sum((a - b) ** 2 for a, b in zip(mean, COLORS[name])))
            assert nearest == cell[0]
            checked += 1
    assert checked > 50


def test_shapes_vary_in_size_and_place_so_reading_a_cell_is_not_a_lookup() -> None:
    widths, offsets = set(), set()
    for scene, _ in split_items("test", SIZES)[:12]:
        image = _drawn(scene)
        for slot, cell in enumerate(scene):
            if cell is not None:
                xs = [x for x, _, _ in _coloured_pixels(image, slot)]
                widths.add((max(xs) - min(xs)) // 3)
                offsets.add((min(xs) - (slot % GRID) * CELL_PX) // 3)
    assert len(widths) >= 4 and len(offsets) >= 4  # a centred one-size drawing gives one of each per shape kind


def test_attribute_traces_read_the_options_in_order_and_stop_at_the_match() -> None:
    attribute = [(s, q) for s, q in split_items("validation", SPLIT_SIZES) if q.family == "attribute"]
    assert {q.answer for _, q in attribute} == set("ABCD")  # every stopping point is exercised
    for scene, question in attribute:
        stop = "ABCD".index(question.answer)
        read = ", ".join(f"option {letter} is {text}" for letter, text in zip("ABCD", question.options[: stop + 1]))
        color = question.options[stop]
        ending = f"The {question.shape} is {color}: {read}, so the answer is {question.answer}. [[{question.answer}]]"
        assert reasoning(question, scene).endswith("\n" + ending)
        assert explanation(question, scene) == ending
        assert read.count(f" is {color}") == 1  # the reading stops at the first (only) match


def test_presence_traces_list_the_asked_shape_then_check_each_colour_up_to_the_match() -> None:
    presence = [(s, q) for s, q in split_items("validation", SPLIT_SIZES) if q.family == "presence"]
    assert {q.answer for _, q in presence} == {"yes", "no"}
    lengths = set()
    for scene, question in presence:
        colours = [c for c, s in objects(scene) if s == question.shape]
        listed = ", ".join(f"{c} {question.shape} ({i})" for i, c in enumerate(colours, start=1)) or "none"
        stop = colours.index(question.color) + 1 if question.answer == "yes" else len(colours)
        checks = ", ".join(f"{c} {'yes' if c == question.color else 'no'}" for c in colours[:stop]) or "none"
        assert reasoning(question, scene).endswith(
            f"\nThe {question.shape}s: {listed}. A {question.color} one? {checks}, "
            f"so the answer is {question.answer}. [[{question.answer}]]")
        assert (question.color in colours) == (question.answer == "yes")
        assert checks.count(" yes") == (question.answer == "yes")  # the checks stop at the first match
        lengths.add(len(colours))
    assert 0 in lengths and max(lengths) >= 4  # empty lists and long ones are both exercised


def test_a_wrong_conclusion_over_a_right_walk() -> None:
    rng = random.Random(3)
    wrong = 0
    for scene, question in split_items("validation", SPLIT_SIZES):
        seen = corrupt_scene(scene, rng)
        text = reasoning_with_walk(question, scene, seen)
        assert text.startswith(grid_walk(scene) + "\n")  # the walk is the true one
        assert text.endswith(reasoning(question, seen)[len(grid_walk(seen)):])  # the conclusion is the misled one
        sample = sample_of(to_row(0, scene, question))
        wrong += BENCHMARK.score(BENCHMARK.parse_answer(text, sample), sample) == 0.0
    assert 0 < wrong < SPLIT_SIZES["validation"]


def test_a_misleading_scene_differs_in_one_cell_and_changes_the_answer() -> None:
    rng = random.Random(4)
    items = split_items("validation", SPLIT_SIZES)
    misled = 0
    for scene, question in items:
        seen = misleading_scene(question, scene, rng)
        assert sum(a != b for a, b in zip(scene, seen)) == 1
        if recompute(question, seen).answer != question.answer:
            misled += 1
        else:  # only where no one cell can change it (two red squares for "is there a red square?")
            assert all(recompute(question, other).answer == question.answer
                       for other in one_cell_misperceptions(scene))
    assert misled > 0.9 * len(items)
    # a random misperception changes the answer far less often: the reason misleading_scene exists
    changed = sum(recompute(q, corrupt_scene(s, rng)).answer != q.answer for s, q in items)
    assert changed < 0.5 * len(items)


def test_splits_written_by_another_world_are_rebuilt_not_reused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    import mai.evals.shapes_world as world
    from mai.run.assets import build_shapes_dataset
    from mai.storage.paths import Home

    home = Home.at(tmp_path)
    sizes = {"test": 12, "validation": 6, "train": 24}  # the rebuild's subject is the world, not the sizes: small
    test_split = build_shapes_dataset(home, sizes) / "test-00000-of-00001.parquet"
    first = pq.read_table(test_split).column("image").to_pylist()
    written = test_split.stat().st_mtime_ns
    build_shapes_dataset(home, sizes)
    assert test_split.stat().st_mtime_ns == written  # the same world: nothing rewritten
    # another world (2-7 shapes per scene), as a home built by an older version of the world holds it
    monkeypatch.setattr(world, "OBJECTS_PER_SCENE", (2, 7))
    build_shapes_dataset(home, sizes)
    rebuilt = pq.read_table(test_split)
    assert rebuilt.column("image").to_pylist() != first
    items = world.split_items("test", sizes)  # the rows on disk are now that world's
    assert max(len(objects(scene)) for scene, _ in items) <= 7
    assert rebuilt.column("question").to_pylist() == [q.text for _, q in items]
    assert rebuilt.column("answer").to_pylist() == [q.answer for _, q in items]
