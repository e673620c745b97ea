"""`training/train_shapes_pair.py`'s stage-2 curriculum: phases split the steps as declared, the loss weights
single out an R target's grid walk exactly, the weighted loss is the model's own loss at weight 1, and a real
(tiny) training run goes through every phase and leaves a snapshot at each boundary, and a continued run
keeps its checkpoint's tokenizer and a flat mixture with the walk weight asked for."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def train(training_script):  # type: ignore[no-untyped-def]
    return training_script("train_shapes_pair")


@pytest.fixture(scope="module")
def shipped_small():  # type: ignore[no-untyped-def]
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen3VLForConditionalGeneration

    from mai.config import SHAPES_SMALL, shipped_models_dir

    checkpoint = shipped_models_dir() / SHAPES_SMALL
    return (Qwen3VLForConditionalGeneration.from_pretrained(checkpoint).eval(),
            AutoTokenizer.from_pretrained(checkpoint), AutoImageProcessor.from_pretrained(checkpoint))


def test_phase_steps_follow_the_shares_and_sum_to_the_total(train) -> None:  # type: ignore[no-untyped-def]
    phases = train.curriculum(train.SMALL)
    assert [p.name for p in phases] == ["walk", "conclusion", "all kinds"]
    assert train.phase_steps(phases, 5000) == [1000, 1500, 2500]
    assert sum(train.phase_steps(phases, 7)) == 7
    assert phases[-1].mixture == train.MIXTURES[train.SMALL]  # the last phase is the full mixture


def test_walk_mask_covers_the_grid_walk_and_nothing_else(train, shipped_small) -> None:  # type: ignore[no-untyped-def]
    from mai.evals.shapes_world import SPLIT_SIZES, split_items

    _, tokenizer, image_processor = shipped_small
    batcher = train.Batcher(tokenizer, image_processor)
    scene, question = split_items("validation", SPLIT_SIZES)[3]
    rng = random.Random(0)
    examples = [train.make_example(scene, question, kind, rng, corrupt=0.0) for kind in ("R", "S")]
    inputs, walk = batcher.encode(examples)
    answer = inputs["labels"] != -100
    walk_text = tokenizer.decode(inputs["input_ids"][0][walk[0]])
    rest_text = tokenizer.decode(inputs["input_ids"][0][answer[0] & ~walk[0]])
    assert walk_text.startswith("Let me look at each row of the grid.\nRow 1:") and "Row 4:" in walk_text
    assert "[[" not in walk_text and rest_text.rstrip().endswith(f"[[{question.answer}]]<|im_end|>")
    assert not bool(walk[1].any())  # an S target has no walk
    assert not bool((walk & ~answer).any())  # the prompt is never part of the walk


def test_weighted_loss_is_the_models_own_loss_at_weight_one(train, shipped_small) -> None:  # type: ignore[no-untyped-def]
    import torch

    from mai.evals.shapes_world import SPLIT_SIZES, split_items

    model, tokenizer, image_processor = shipped_small
    batcher = train.Batcher(tokenizer, image_processor)
    rng = random.Random(1)
    examples = [train.make_example(scene, question, "R", rng, corrupt=0.0)
                for scene, question in split_items("validation", SPLIT_SIZES)[:4]]
    inputs, walk = batcher.encode(examples)
    with torch.no_grad():
        output = model(**inputs)
    labels = inputs["labels"]
    assert train.weighted_answer_loss(output.logits, labels, walk, 1.0).item() == pytest.approx(output.loss.item(),
                                                                                                 rel=1e-5)
    # weight 0: the mean over the conclusion tokens alone
    conclusion_only = labels.masked_fill(walk, -100)
    with torch.no_grad():
        expected = model(**{**inputs, "labels": conclusion_only}).loss.item()
    assert train.weighted_answer_loss(output.logits, labels, walk, 0.0).item() == pytest.approx(expected, rel=1e-5)


def test_tiny_training_run_walks_through_every_phase(train, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "pair"
    assert train.main(["--out", str(out), "--models", train.SMALL, "--steps-small", "6", "--vision-steps", "1",
                       "--pool", "64", "--batch", "4", "--log-every", "1", "--threads", "1", "--save-phases"]) == 0
    log = json.loads((out / train.SMALL / "training_log.json").read_text())
    assert [(p["phase"], p["steps"]) for p in log["curriculum"]] == [("walk", 1), ("conclusion", 2), ("all kinds", 3)]
    assert [entry["phase"] for entry in log["log"]] == ["walk"] + ["conclusion"] * 2 + ["all kinds"] * 3
    for phase in ("walk", "conclusion"):
        assert (out / f"{train.SMALL}-after-{phase}" / "model.safetensors").is_file()
    assert (out / train.SMALL / "model.safetensors").is_file()
    # a continuation: one flat mixture with the walk down-weighted, on the checkpoint's own tokenizer even
    # though the traces' wording (the tokenizer corpus) has changed since
    monkeypatch.setattr(train, "corpus", lambda items: ["traces worded anew"] * 50)
    more = tmp_path / "more"
    assert train.main(["--out", str(more), "--init-from", str(out), "--models", train.SMALL, "--no-curriculum",
                       "--mixture", "R=0.5,S=0.5", "--walk-weight", "0.25", "--steps-small", "2", "--pool", "64",
                       "--batch", "4", "--log-every", "1", "--threads", "1"]) == 0
    continued = json.loads((more / train.SMALL / "training_log.json").read_text())
    assert continued["curriculum"] == [{"phase": "mixed", "steps": 2, "mixture": {"R": 0.5, "S": 0.5},
                                        "walk_token_weight": 0.25}]
    assert continued["total_stage2_steps"] == 8 and continued["continued_from"]["steps"] == 6
    from mai.evals.shapes_world import DRAWING, OBJECTS_PER_SCENE

    assert continued["objects_per_scene"] == list(OBJECTS_PER_SCENE)  # which world each run trained on
    assert continued["drawing"] == DRAWING
    assert continued["vision_pretraining"] == log["vision_pretraining"]  # stage 1 was not run again
    before, after = (json.loads((d / train.SMALL / "tokenizer.json").read_text())["model"] for d in (out, more))
    assert (after["vocab"], after["merges"]) == (before["vocab"], before["merges"])
    # a world whose images changed: stage 1 again on the checkpoint's tower, and 0 stage-2 steps stops there
    seen = tmp_path / "seen-anew"
    assert train.main(["--out", str(seen), "--init-from", str(more), "--models", train.SMALL, "--vision-again",
                       "--vision-steps", "2", "--vision-batch", "4", "--no-curriculum", "--steps-small", "0",
                       "--pool", "64", "--batch", "4", "--threads", "1"]) == 0
    again = json.loads((seen / train.SMALL / "training_log.json").read_text())
    assert again["vision_pretraining"]["steps"] == 2 and again["vision_pretraining"]["continued_tower"] is True
    assert again["total_stage2_steps"] == 8 and again["continued_from"]["vision_pretraining"]["steps"] == 1


def test_conclusion_error_references_keep_the_true_walk(train) -> None:  # type: ignore[no-untyped-def]
    from mai.evals.shapes_world import SPLIT_SIZES, grid_walk, split_items

    items = split_items("validation", SPLIT_SIZES)[:40]
    rng = random.Random(5)
    misled = 0
    for scene, question in items:
        example = train.make_example(scene, question, "RT", rng, corrupt=1.0, conclusion_errors=1.0)
        assert grid_walk(scene) in example.prompt_text  # every reference walks the true grid ...
        assert example.target.strip("[]") == question.answer  # ... and RT is still taught the true answer
        misled += f"[[{question.answer}]]" not in example.prompt_text  # the reference concluded otherwise
    assert misled > 0
    # without conclusion errors the references misperceive a cell in the walk itself
    plain = [train.make_example(s, q, "RT", random.Random(5), corrupt=1.0) for s, q in items]
    assert any(grid_walk(s) not in e.prompt_text for (s, _), e in zip(items, plain))


def test_wrong_references_mislead_rt_and_leave_other_kinds_alone(train) -> None:  # type: ignore[no-untyped-def]
    from mai.evals.shapes_world import SPLIT_SIZES, split_items

    items = split_items("validation", SPLIT_SIZES)[:60]
    rng = random.Random(6)
    misled = 0
    for scene, question in items:
        example = train.make_example(scene, question, "RT", rng, corrupt=0.0, wrong_references=1.0)
        misled += f"[[{question.answer}]]" not in example.prompt_text  # the reference concludes otherwise ...
        assert example.target.strip("[]") == question.answer  # ... and RT is taught the true answer
        # S2 restates its own reasoning: untouched by wrong references (corrupt 0: a faithful reference)
        s2 = train.make_example(scene, question, "S2", rng, corrupt=0.0, wrong_references=1.0)
        assert s2.target == question.answer and f"[[{question.answer}]]" in s2.prompt_text
    assert misled > 0.9 * len(items)  # all but where no one cell changes the answer


def test_recorded_references_are_the_rt_references_of_their_items(train, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mai.evals.shapes_world import SPLIT_SIZES, item_key, split_items

    items = split_items("validation", SPLIT_SIZES)[:30]  # stands in for a training pool
    lines = [{"key": item_key(*items[i]), "reference": f"my own reasoning no. {i} [[x]]", "right": False}
             for i in (3, 7)]
    path = tmp_path / "refs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    recorded = train.recorded_references(path, items)
    assert recorded == {3: "my own reasoning no. 3 [[x]]", 7: "my own reasoning no. 7 [[x]]"}
    stream = train.batch_stream({"RT": 1.0}, random.Random(0), 0.0, items, 8, recorded=recorded, recorded_share=1.0)
    kind, examples = next(stream)
    assert kind == "RT" and len(examples) == 8
    for example in examples:  # every example is one of the two items, with its own recorded reasoning
        index = 3 if "no. 3" in example.prompt_text else 7
        assert f"my own reasoning no. {index}" in example.prompt_text and example.scene == items[index][0]
        assert example.target.strip("[]") == items[index][1].answer  # taught the true answer, not the reference's
    # other kinds never use them
    _, s_examples = next(train.batch_stream({"S": 1.0}, random.Random(0), 0.0, items, 4, recorded=recorded,
                                                 recorded_share=1.0))
    assert not any("my own reasoning" in e.prompt_text for e in s_examples)
    # references recorded on another world or split fail loudly instead of training on nothing
    path.write_text(json.dumps({"key": "not-an-item", "reference": "r", "right": True}) + "\n")
    with pytest.raises(SystemExit, match="not in this training pool"):
        train.recorded_references(path, items)


def test_model_card_says_which_world_each_run_trained_on(training_script) -> None:  # type: ignore[no-untyped-def]
    evaluate = training_script("evaluate_shapes_pair")
    first = {"corrupt_reference_share": 0.4, "mixture": {"S": 1.0}}  # a log from before density was recorded
    later = {"corrupt_reference_share": 0.5, "objects_per_scene": [3, 12], "continued_from": first,
             "curriculum": [{"phase": "mixed", "steps": 10, "mixture": {"R": 1.0}, "walk_token_weight": 0.5}]}
    lines = evaluate._stream_lines(later)
    assert len(lines) == 2 and lines[0].endswith("scenes of 2-7 shapes, drawn clean (centred shapes of one size)")
    assert lines[1].endswith("scenes of 3-12 shapes, drawn clean (centred shapes of one size)")
    cluttered = {**later, "drawing": {"shape_px": [10, 24], "color_jitter": 30, "pixel_noise": 18.0,
                                      "clutter_lines": 3}}
    assert evaluate._stream_lines(cluttered)[1].endswith(
        "scenes of 3-12 shapes, drawn cluttered (shapes 10-24 px, placed and rotated at random, colour +-30 per "
        "channel, pixel noise sigma 18.0, 3 grey lines)")
    misleading = {**later, "wrong_reference_share": 0.3}
    assert "RT references that reach a wrong answer (the misperceived cell changes it): 0.3" in \
        evaluate._stream_lines(misleading)[1]
    assert "wrong answer" not in evaluate._stream_lines(later)[1]  # older logs say nothing of it
    recorded = {**later, "recorded_references": {"file": "refs.jsonl", "items": 4800, "share_of_rt": 0.5}}
    assert ("RT references the small model itself wrote (its R reasoning on 4800 train items, "
            "training/record_small_references.py): 0.5 of RT examples") in evaluate._stream_lines(recorded)[1]
    assert "itself wrote" not in evaluate._stream_lines(later)[1]


@pytest.mark.usefixtures("shapes_dataset")
@pytest.mark.prefect
@pytest.mark.slow
def test_small_references_are_recorded_through_the_pipeline_for_training_items(training_script, home,
                                                                               tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mai.config import shipped_models_dir
    from mai.evals.shapes_world import SPLIT_SIZES, generate_items, held_out_keys, split_items

    record = training_script("record_small_references")
    train = training_script("train_shapes_pair")
    out = tmp_path / "refs.jsonl"
    assert record.main(["--models-dir", str(shipped_models_dir()), "--home", str(home), "--out", str(out),
                        "--limit", "6"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(row["reference"].startswith("Let me look at each row") for row in rows)
    # the train split is the head of the training pool, so each reference lands on its own training item
    pool = generate_items("train", 50, held_out_keys(SPLIT_SIZES))
    recorded = train.recorded_references(out, pool)
    assert sorted(recorded) == list(range(6))
    assert pool[:6] == split_items("train", SPLIT_SIZES)[:6]
    # recorded again into the same home, every generation comes from the cache (stored under the first run's
    # id) and is still read back, through the new run's scores
    again = tmp_path / "again.jsonl"
    assert record.main(["--models-dir", str(shipped_models_dir()), "--home", str(home), "--out", str(again),
                        "--limit", "6"]) == 0
    assert again.read_text() == out.read_text()
