"""Evaluate the trained shapes pair through the real pipeline and write each model's card.

    .venv/bin/python training/evaluate_shapes_pair.py --models-dir mai/assets/models --home build/shapes-eval

Runs, on the held-out test split (every run lands in the store, so the numbers are also SQL away):
each model alone with S, E, R and R+S2; Full RT (small R, then large RT on every sample); the MAI cascade
with and without S2. Then checks the world's targets (`check_targets`) and writes `README.md` (the model card) and
`evaluation.json` next to each model's weights. Training facts come from the `training_log.json` the
training script left in each model directory.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mai.config import SHAPES_LARGE, SHAPES_MAX_NEW_TOKENS, SHAPES_SMALL, RunConfig
from mai.evals.shapes_world import FAMILIES, SPLIT_SEEDS, SPLIT_SIZES

# quiet, offline-friendly Prefect defaults for an embedded run, as `mai` sets them (mai.api leaves the
# environment alone); the user's env wins
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

FIRST_WORLD_OBJECTS_PER_SCENE = (2, 7)
SINGLE_RUNS = [(role, kind, s2) for role in ("small", "large") for kind, s2 in
               (("S", False), ("E", False), ("R", False), ("R", True))]


def run_all(models_dir: Path, home: str, split: str, limit: int | None) -> dict[str, dict[str, Any]]:
    """One run per configuration; the cascade run is the same configuration as `mai demo` and the default
    regression run (shipped pair, test split, the same token budgets)."""
    from mai import api

    base = {"benchmark": "shapes", "split": split, "limit": limit, "home": home,
            "small_model": str(models_dir / SHAPES_SMALL), "large_model": str(models_dir / SHAPES_LARGE),
            "max_new_tokens": SHAPES_MAX_NEW_TOKENS}
    # shards and batch size stay RunConfig's defaults, so the cards' cascade is exactly `mai demo`'s run (for
    # this pair, batch 16 and batch 8 gave identical S and R texts on all 480 test items)
    configs = {f"{role}-{kind}{'+S2' if s2 else ''}": {"mode": "single", "single_model": role, "single_prompt": kind,
                                                        "s2": s2} for role, kind, s2 in SINGLE_RUNS}
    configs.update({"full-RT": {"mode": "full_rt"}, "cascade": {"mode": "cascade"},
                    "cascade+S2": {"mode": "cascade", "s2": True}})
    return {name: summarize(api.run(RunConfig(**base, **values, run_name=f"eval-{name}")))
            for name, values in configs.items()}


def summarize(manifest: dict[str, Any]) -> dict[str, Any]:
    metrics = {(m["metric"], m["subset"]): m["value"] for m in manifest["metrics"]}
    tokens = sum(s["output_tokens"] for s in manifest["stages"].values())
    valid = sum(n for route, n in manifest["routes"].items() if route != "ERROR")
    return {
        "run_id": manifest["run_id"], "accuracy": metrics.get(("accuracy", "overall")),
        "by_family": {f: metrics.get(("accuracy", f"category={f}")) for f in FAMILIES},
        "unparsed_rate": metrics.get(("unparsed_rate", "overall")), "routes": manifest["routes"],
        "output_tokens": tokens, "output_tokens_per_sample": tokens / valid if valid else 0.0,
        "mean_output_tokens": {name: s["mean_output_tokens"] for name, s in manifest["stages"].items()},
    }


def check_targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    acc = {name: 100 * r["accuracy"] for name, r in results.items()}
    r_len = results["small-R"]["mean_output_tokens"]["single"]
    s_len = results["small-S"]["mean_output_tokens"]["single"]
    cascade = results["cascade"]
    valid = sum(n for route, n in cascade["routes"].items() if route != "ERROR")
    mv1 = 100 * cascade["routes"]["MV1"] / valid
    return [
        _target("large-S beats small-S by >= 10 points", acc["large-S"] - acc["small-S"] >= 10,
                f"{acc['large-S']:.1f} vs {acc['small-S']:.1f} ({acc['large-S'] - acc['small-S']:+.1f})"),
        _target("small-R beats small-S", acc["small-R"] > acc["small-S"],
                f"{acc['small-R']:.1f} vs {acc['small-S']:.1f}"),
        _target("small R outputs >= 5x longer than S outputs", r_len >= 5 * s_len,
                f"{r_len:.1f} vs {s_len:.1f} tokens ({r_len / s_len:.1f}x)"),
        _target("large given the small model's reasoning (Full RT) >= large-S", acc["full-RT"] >= acc["large-S"],
                f"{acc['full-RT']:.1f} vs {acc['large-S']:.1f}"),
        _target("MV1 agreement between 40 % and 95 %", 40 <= mv1 <= 95, f"{mv1:.1f} %"),
        _target("cascade within 2 points of large-R", acc["cascade"] >= acc["large-R"] - 2,
                f"{acc['cascade']:.1f} vs {acc['large-R']:.1f} ({acc['cascade'] - acc['large-R']:+.1f})"),
        _target("cascade generates fewer tokens than large-R",
                cascade["output_tokens"] < results["large-R"]["output_tokens"],
                f"{cascade['output_tokens']} vs {results['large-R']['output_tokens']} output tokens"),
    ]


def _target(name: str, met: bool, measured: str) -> dict[str, Any]:
    return {"target": name, "met": met, "measured": measured}


def model_card(name: str, role: str, training: dict[str, Any], results: dict[str, dict[str, Any]],
               targets: list[dict[str, Any]], split: str) -> str:
    rows = [f"| {kind} | {100 * results[kind]['accuracy']:.1f} | "
            + " | ".join(f"{100 * (results[kind]['by_family'][f] or 0):.1f}" for f in FAMILIES)
            + f" | {results[kind]['output_tokens_per_sample']:.1f} |"
            for kind in results if kind.startswith(role + "-")]
    pair_rows = [f"| {kind} | {100 * results[kind]['accuracy']:.1f} | "
                 + " | ".join(f"{100 * (results[kind]['by_family'][f] or 0):.1f}" for f in FAMILIES)
                 + f" | {results[kind]['output_tokens_per_sample']:.1f} | {_routes(results[kind]['routes'])} |"
                 for kind in ("full-RT", "cascade", "cascade+S2")]
    family_head = " | ".join(FAMILIES)
    losses = ", ".join(f"{k} {v}" for k, v in training["final_loss_by_kind"].items())
    vision = training.get("vision_pretraining") or {}
    again = " again on this world's images, from the earlier run's tower" if vision.get("continued_tower") else ""
    vision_line = (f"- stage 1{again} (vision tower + merger on per-cell content/row/column labels): {vision['steps']} steps "
                   f"of {vision['batch_images']} images, lr {vision['lr']}, {vision['train_s'] / 60:.1f} min, final "
                   f"cell accuracy {vision['final_cell_accuracy']}" if vision else "- no vision pretraining stage")
    return "\n".join([
        f"# {name}", "",
        (f"The {role} model of mai's `shapes` world: a Qwen3-VL-architecture VLM ({training['parameters']:,} "
        "parameters) trained from scratch on the synthetic `shapes` benchmark, meant to make the MAI paper's effects "
        "observable offline in minutes. Weights: `model.safetensors` (float32). Tokenizer: a byte-level BPE "
        "(Qwen2 pipeline) shared by the pair; image preprocessing: Qwen3-VL's (patch 16, merge 2) at 128x128 px, "
        "16 image tokens, one per grid cell."), "",
        (f"**Status: {sum(t['met'] for t in targets)} of {len(targets)} targets met** (table at the end; how the "
         "pair was trained, what each attempt measured and what is left: `docs/benchmarks.md`, \"Training the "
         "shapes pair\")."), "",
        "## Training", "",
        *[f"- command: `{command}`" for command in _commands(training)],
        (f"- data: `mai.evals.shapes_world`, training stream seed {training['seed']} (+ the model's own seed), "
        f"split seeds {SPLIT_SEEDS}; training items exclude every test and validation item "
        f"(sizes {SPLIT_SIZES['test']} and {SPLIT_SIZES['validation']})"),
        *_stream_lines(training),
        vision_line,
        (f"- stage 2 (everything but the vision tower, answer tokens only): "
         f"{training.get('total_stage2_steps', training['steps'])} steps in all (the last run: {training['steps']} "
         f"of batch {training['batch_size']}, AdamW, peak lr {training['lr']}, on {training['device']} with "
         f"{training['threads']} thread(s)), {training.get('total_train_s', training['train_s']) / 60:.1f} min"),
        f"- final training loss (answer tokens, smoothed): {training['final_smoothed_loss']}; by prompt kind: {losses}",
        "",
        f"## Accuracy on the held-out {split} split (%), through the mai pipeline", "",
        f"| prompt | overall | {family_head} | output tokens / sample |",
        "|---|---|" + "---|" * len(FAMILIES) + "---|", *rows, "",
        "## The pair (small + large)", "",
        f"| run | overall | {family_head} | output tokens / sample | routes |",
        "|---|---|" + "---|" * len(FAMILIES) + "---|---|", *pair_rows, "",
        "## Targets", "",
        "| target | met | measured |", "|---|---|---|",
        *[f"| {t['target']} | {'yes' if t['met'] else 'no'} | {t['measured']} |" for t in targets], "",
        "Reproduce: `python training/evaluate_shapes_pair.py` (numbers also in `evaluation.json`).", "",
    ])


def _stream_lines(training: dict[str, Any]) -> list[str]:
    """What stage 2 was fed, run by run (a continued run keeps the log of the one it continued): the
    curriculum's phases in order, or one flat mixture."""
    earlier = _stream_lines(training["continued_from"]) if training.get("continued_from") else []
    corrupt = f"share of S2/RT references with one misperceived cell: {training['corrupt_reference_share']}"
    if training.get("conclusion_error_share"):
        corrupt += f" (of which {training['conclusion_error_share']} with the true walk and a wrong conclusion)"
    if training.get("wrong_reference_share"):
        corrupt += (f"; RT references that reach a wrong answer (the misperceived cell changes it): "
                    f"{training['wrong_reference_share']}, the rest as above")
    if training.get("recorded_references"):
        recorded = training["recorded_references"]
        corrupt += (f"; RT references the small model itself wrote (its R reasoning on {recorded['items']} train "
                    f"items, training/record_small_references.py): {recorded['share_of_rt']} of RT examples")
    # runs logged before the world's density was recorded all trained on the first world's 2-7 shapes
    low, high = training.get("objects_per_scene", FIRST_WORLD_OBJECTS_PER_SCENE)
    corrupt += f"; scenes of {low}-{high} shapes, {_drawing(training.get('drawing'))}"
    run = "then, continued" if earlier else "stage 2"
    phases = training.get("curriculum") or [{"phase": "mixed", "mixture": training["mixture"]}]
    if len(phases) == 1:  # one flat mixture (--no-curriculum, or a log from before the curriculum)
        flat = phases[0]
        steps = f"{flat['steps']} steps, " if "steps" in flat else ""
        walk = flat.get("walk_token_weight", 1.0)
        weight = f", R's grid-walk tokens weighted {walk} in the loss" if walk != 1.0 else ""
        return [*earlier, f"- {run}: {steps}prompt kinds {flat['mixture']}{weight}; {corrupt}"]
    return [*earlier,
            (f"- {run}, a curriculum, in order (walk weight: how much an R target's grid-walk tokens count in the loss "
             f"relative to its other answer tokens); {corrupt}:"),
            *[f"  - {p['phase']}: {p['steps']} steps, prompt kinds {p['mixture']}, walk weight "
              f"{p['walk_token_weight']}" for p in phases]]


def _drawing(drawing: dict[str, Any] | None) -> str:
    """How a run's images were drawn; runs logged before the drawing was recorded all saw clean, centred,
    one-size shapes (the cluttered drawing came with the field)."""
    if not drawing:
        return "drawn clean (centred shapes of one size)"
    low, high = drawing["shape_px"]
    return (f"drawn cluttered (shapes {low}-{high} px, placed and rotated at random, colour +-{drawing['color_jitter']}"
            f" per channel, pixel noise sigma {drawing['pixel_noise']}, {drawing['clutter_lines']} grey lines)")


def _commands(training: dict[str, Any]) -> list[str]:
    """The training commands, first to last (a continued run keeps the log of the run it continued)."""
    earlier = _commands(training["continued_from"]) if training.get("continued_from") else []
    return earlier + [training.get("command", "python training/train_shapes_pair.py")]


def _routes(routes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in routes.items() if v)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models-dir", type=Path, default=Path("mai/assets/models"))
    parser.add_argument("--home", default="build/shapes-eval")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--baseline-out", type=Path, default=Path("mai/assets/regression/shapes-cascade.json"),
                        help="where the cascade run is written as the regression baseline")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = run_all(args.models_dir.resolve(), args.home, args.split, args.limit)
    targets = check_targets(results)
    if args.split == "test" and args.limit is None:
        from mai.storage.paths import Home

        from mai.run.baseline import baseline_file

        args.baseline_out.parent.mkdir(parents=True, exist_ok=True)
        baseline = baseline_file(Home.at(args.home), results["cascade"]["run_id"])
        args.baseline_out.write_text(json.dumps(baseline, indent=1) + "\n")
    for name, role in ((SHAPES_SMALL, "small"), (SHAPES_LARGE, "large")):
        directory = args.models_dir / name
        training = json.loads((directory / "training_log.json").read_text())
        card = model_card(name, role, training, results, targets, args.split)
        (directory / "README.md").write_text(card)
        (directory / "evaluation.json").write_text(json.dumps({"split": args.split, "results": results,
                                                                "targets": targets}, indent=1))
    print(json.dumps(targets, indent=1))
    print(json.dumps({k: round(100 * v["accuracy"], 1) for k, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
