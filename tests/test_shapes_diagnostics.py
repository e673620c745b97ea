"""`training/diagnose_shapes_pair.py` on the shipped small model: it tells an image-reading prompt kind from an
image-blind one, and scores the model's own grid walk per cell (the shipped model, trained with the walk ->
conclusion -> all kinds curriculum, names every cell's colour and, above chance, its kind)."""

from __future__ import annotations

import json

import pytest

# the module's fixtures build stores of many runs: the full suite's, not the fast tier's
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def diagnose(training_script):  # type: ignore[no-untyped-def]
    return training_script("diagnose_shapes_pair")


def test_parse_walk_reads_sixteen_cells_in_row_major_order(diagnose) -> None:  # type: ignore[no-untyped-def]
    from mai.evals.shapes_world import grid_walk

    scene = (("red", "circle"), None, None, ("blue", "square")) + (None,) * 11 + (("green", "triangle"),)
    cells = diagnose.parse_walk(grid_walk(scene) + "\nThe answer. [[1]]")
    assert len(cells) == 16 and cells[0] == "red circle" and cells[3] == "blue square"
    assert cells[15] == "green triangle" and cells[1] == "empty"
    assert diagnose.parse_walk("Row 1: red circle.") == ["red circle", "", "", ""]  # a cut-off walk


def test_shipped_small_model_reads_the_image_in_its_walk(diagnose, capsys) -> None:  # type: ignore[no-untyped-def]
    from mai.config import SHAPES_SMALL, shipped_models_dir

    checkpoint = shipped_models_dir() / SHAPES_SMALL
    assert diagnose.main([str(checkpoint), "--kinds", "S,R", "--items", "16", "--walk", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    reliance = report["image_reliance"]
    # swapped images break both the walk and the short answer: the shipped model reads the image for each
    # (a pair trained without the curriculum shows an S gap of 0.02: its S ignores the image)
    assert reliance["R"]["gap"] > 0.3 and reliance["S"]["gap"] > 0.3
    # the walk names the colours and, well above chance (1/3), the kinds: on the cluttered drawing the small
    # rotated shapes are what the small tower misreads (measured on these 16 items: colour 1.0, shape 0.64)
    assert report["walk"]["color"] > 0.9 and report["walk"]["shape"] > 0.5
    assert report["walk"]["occupied_cells"] > 16


def test_walk_and_conclusion_tell_a_misreading_from_a_conclusion_that_departs(diagnose) -> None:  # type: ignore[no-untyped-def]
    import random

    from mai.evals.shapes_world import (
        SPLIT_SIZES,
        misleading_scene,
        reasoning,
        reasoning_with_walk,
        split_items,
    )

    rng = random.Random(8)
    kinds = {}
    for scene, question in split_items("validation", SPLIT_SIZES)[:40]:
        seen = misleading_scene(question, scene, rng)
        assert diagnose.walk_and_conclusion(reasoning(question, scene), scene, question) == (True, True)
        if seen == scene or question.answer == reasoning(question, seen).rsplit("[[", 1)[1].rstrip("]"):
            continue  # no one cell changes this item's answer
        kinds[question.family] = True
        # misperceived: the walk implies a wrong answer and the conclusion follows it
        assert diagnose.walk_and_conclusion(reasoning(question, seen), scene, question) == (False, True)
        # the true walk, then the misled conclusion: the conclusion departs from the walk
        assert diagnose.walk_and_conclusion(reasoning_with_walk(question, scene, seen), scene, question) == (True, False)
    assert len(kinds) == 4  # every question family was exercised
    # a walk cut off before the end is read as empty cells; unparseable conclusions never "follow"
    scene, question = split_items("validation", SPLIT_SIZES)[0]
    assert diagnose.walk_and_conclusion("Row 1: red", scene, question)[1] is False


@pytest.mark.usefixtures("shapes_dataset")
@pytest.mark.slow
def test_a_stored_r_run_is_read_item_by_item(diagnose, home, capsys) -> None:  # type: ignore[no-untyped-def]
    from mai.api import run as execute
    from mai.config import SHAPES_MAX_NEW_TOKENS, RunConfig, shapes_pair_config

    pair = shapes_pair_config(home=str(home), limit=12)
    base = {"home": str(home), "benchmark": "shapes", "limit": 12, "max_new_tokens": SHAPES_MAX_NEW_TOKENS,
            "small_model": pair.small_model, "large_model": pair.large_model, "mode": "single", "single_model": "small"}
    r_run = execute(RunConfig(**base, single_prompt="R", run_name="r"), local=True)["run_id"]
    s_run = execute(RunConfig(**base, single_prompt="S", run_name="s"), local=True)["run_id"]
    assert diagnose.main(["--home", str(home), "--r-run", r_run, "--s-run", s_run]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["items"] == 12 and sum(report["counts"].values()) == 12
    assert all(key.startswith(("S right, R", "S wrong, R")) for key in report["counts"])
    # the shipped small model's walk mostly implies the truth (77.5 % R on the test split)
    truthful = sum(n for key, n in report["counts"].items() if "walk implies the truth" in key)
    assert truthful >= 6
    with pytest.raises(SystemExit, match="no scored R generations"):
        diagnose.main(["--home", str(home), "--r-run", s_run])
