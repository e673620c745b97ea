"""Train the `shapes` world's tiny small/large Qwen3-VL pair from scratch, on CPU (or a GPU when present).

    .venv/bin/python training/train_shapes_pair.py --out build/shapes-pair --steps-small 3000 --steps-large 3000

Both models share one tokenizer (byte-level BPE trained here on the world's text with Qwen2's pipeline) and
Qwen3-VL's image preprocessing at 128x128 px (16 image tokens, one per grid cell). Every training example is a
prompt built by the pipeline's own prompt code (`mai.prompts.build_prompt`, the benchmark's question layout,
the tokenizer's chat template), so what the models learn is exactly what the cascade will ask:
- S -> `[[answer]]`; E -> one sentence + `[[answer]]`; R -> a row-by-row walk of the grid, the steps,
  `[[answer]]`;
- S2 -> the bare answer stated by the reasoning in the prompt (the model's own previous thinking);
- RT -> the true answer, given a smaller model's reference reasoning that is right or, in `--corrupt` of the
  cases, misperceives one cell, and in `--conclusion-errors` of those walks the grid right but concludes
  wrongly (so the large model learns to check, not to copy); `--wrong-references` of RT references are
  made to reach a wrong answer (a random misperception changes it only a quarter of the time).
Stage 1 teaches the vision tower to name each cell; stage 2 is a curriculum (`curriculum`): R alone until the
grid walk is read, then R with the loss weighted on the conclusion after the walk, then every kind.
Training items never overlap the validation and test splits. Deterministic for a seed and thread count.
Loss is on the answer tokens only. Writes `<out>/<name>/` checkpoints (safetensors) and `training_log.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mai.backends.processor import ImageOnlyProcessor
from mai.backends.tiny_models import build_config, build_image_processor, build_tokenizer
from mai.evals.shapes import ShapesBenchmark
from mai.evals.shapes_world import (
    COLORS,
    DRAWING,
    GRID,
    IMAGE_PX,
    OBJECTS_PER_SCENE,
    SHAPES,
    SPLIT_SIZES,
    Question,
    Scene,
    corrupt_scene,
    draw,
    explanation,
    generate_items,
    grid_walk,
    held_out_keys,
    item_key,
    misleading_scene,
    random_scene,
    reasoning,
    reasoning_with_walk,
    recompute,
    short_answer,
)
from mai.prompts import INSTRUCTIONS, RT_TEMPLATES, build_prompt
from mai.types import PromptKind, Sample

SMALL, LARGE = "mai-shapes-small", "mai-shapes-large"
# ~1.2 M (small) and ~5.7 M (large) parameters in all; the vision towers differ too
SIZES = {
    SMALL: {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "head_dim": 32, "ffn": 384, "seed": 11},
    LARGE: {"hidden": 256, "layers": 6, "heads": 8, "kv_heads": 4, "head_dim": 32, "ffn": 640, "seed": 12},
}
VISION_SIZES = {
    SMALL: {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2},
    LARGE: {"depth": 3, "hidden_size": 128, "intermediate_size": 256, "num_heads": 4},
}
# share of each prompt kind in a model's training stream once it reads the grid (the last curriculum phase)
MIXTURES: dict[str, dict[PromptKind, float]] = {
    SMALL: {"S": 0.35, "E": 0.1, "R": 0.35, "S2": 0.2},
    LARGE: {"S": 0.3, "E": 0.1, "R": 0.25, "S2": 0.05, "RT": 0.3},
}


@dataclass(frozen=True)
class Phase:
    """One stretch of stage 2: its share of the steps, its prompt-kind mixture, and how much the grid-walk
    tokens of R targets count in the loss relative to the rest of the answer (1.0: every token alike)."""

    name: str
    share: float
    mixture: dict[PromptKind, float]
    walk_weight: float = 1.0


def curriculum(name: str) -> tuple[Phase, ...]:
    """Walk, then conclude, then everything. Measured on the shapes world: a mixed stream from the start does
    not teach the walk (shapes at chance after 1,600 steps) because the other kinds starve it, while R alone
    reads every cell's colour and shape within ~500 steps; but the few tokens after the walk (match the
    question against the walk, tally, pick the option letter) barely move a token-mean loss, so an R-only
    model still answers 'yes' and 'D' almost always. The conclusion phase weights those tokens up; the last phase adds
    the other prompt kinds while keeping the walk's weight low (it is learned, and it is most of R's tokens)."""
    return (Phase("walk", 0.2, {"R": 1.0}),
            Phase("conclusion", 0.3, {"R": 1.0}, walk_weight=0.1),
            Phase("all kinds", 0.5, MIXTURES[name], walk_weight=0.25))


BENCHMARK = ShapesBenchmark()


@dataclass(frozen=True)
class Example:
    prompt_text: str
    target: str
    scene: Scene
    walk_chars: int = 0  # length of the grid walk that opens an R target (0: no walk)


def as_sample(question: Question) -> Sample:
    """Just enough of a Sample for the benchmark's prompt layout and answer style."""
    return Sample(sample_id="", benchmark="shapes", question=question.text, options=question.options,
                  answer=question.answer, image_paths=(), image_sha256=(), category=question.family,
                  content_hash="", answer_style="letter" if question.options else "phrase")


def make_example(scene: Scene, question: Question, kind: PromptKind, rng: random.Random, corrupt: float,
                 conclusion_errors: float = 0.0, wrong_references: float = 0.0,
                 recorded_reference: str | None = None) -> Example:
    """`corrupt`: share of S2/RT references that misperceive one cell; `conclusion_errors`: share of those
    whose walk is nevertheless the true one, so the error sits in the conclusion alone; `wrong_references`:
    share of RT references whose misperceived cell is one that changes the answer (the rest as `corrupt`);
    `recorded_reference`: an RT reference the small model itself wrote for this item, with its own errors."""
    sample = as_sample(question)
    style, rt_template = BENCHMARK.answer_style(sample), BENCHMARK.rt_template(sample)
    upstream = None
    if kind == "S":
        target = short_answer(question)
    elif kind == "E":
        target = explanation(question, scene)
    elif kind == "R":
        target = reasoning(question, scene)
    else:
        if kind == "RT" and recorded_reference is not None:
            seen, upstream = scene, recorded_reference  # its errors are its own; the answer stays the true one
        else:
            # the wrong-reference and conclusion-error draws happen only when asked for, so that runs without
            # them keep the stream they always had
            if kind == "RT" and wrong_references and rng.random() < wrong_references:
                seen = misleading_scene(question, scene, rng)
            else:
                seen = corrupt_scene(scene, rng) if rng.random() < corrupt else scene
            upstream = reasoning(question, seen)
            if conclusion_errors and seen != scene and rng.random() < conclusion_errors:
                upstream = reasoning_with_walk(question, scene, seen)
        # S2 restates the model's own reasoning; RT answers from the image, the reference only a hint
        answer = recompute(question, seen).answer if kind == "S2" else question.answer
        target = f"[[{answer}]]" if kind == "RT" and rt_template == "rt_reference" else answer
    prompt = build_prompt(BENCHMARK.format_question(sample), ("image",), kind, style, rt_template, upstream)
    return Example(prompt.text, target, scene, len(grid_walk(scene)) if kind == "R" else 0)


def corpus(items: list[tuple[Scene, Question]]) -> list[str]:
    """Tokenizer training text: every instruction, and every kind of answer over a sample of items."""
    texts = list(INSTRUCTIONS.values()) * 20 + list(RT_TEMPLATES.values()) * 20
    for scene, question in items:
        texts += [BENCHMARK.format_question(as_sample(question)), reasoning(question, scene),
                  explanation(question, scene), short_answer(question)]
    return texts


class Batcher:
    """Examples -> padded model inputs with loss on the answer tokens (and the end-of-turn token) only."""

    def __init__(self, tokenizer: Any, image_processor: Any) -> None:
        self.tokenizer = tokenizer
        self.processor = ImageOnlyProcessor(tokenizer, image_processor)
        self.images: dict[Scene, Any] = {}

    def image(self, scene: Scene) -> Any:
        import io

        from PIL import Image

        if scene not in self.images:
            if len(self.images) > 20000:
                self.images.clear()
            self.images[scene] = Image.open(io.BytesIO(draw(scene))).convert("RGB")
        return self.images[scene]

    def __call__(self, examples: list[Example]) -> dict[str, Any]:
        return self.encode(examples)[0]

    def encode(self, examples: list[Example]) -> tuple[dict[str, Any], Any]:
        """Model inputs (labels on the answer tokens only) and a mask of the answer tokens that belong to an
        R target's grid walk, for the curriculum's loss weights."""
        import torch

        texts = [self.processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": e.prompt_text}]}],
            tokenize=False, add_generation_prompt=True) for e in examples]
        encoded = self.processor(text=texts, images=[[self.image(e.scene)] for e in examples], return_tensors="pt",
                                 padding=True)
        rows, labels, walks = [], [], []
        for row, example in enumerate(examples):
            prompt = encoded["input_ids"][row][encoded["attention_mask"][row].bool()].tolist()
            answer = self.tokenizer(example.target + "<|im_end|>", add_special_tokens=False,
                                    return_offsets_mapping=True)
            rows.append(prompt + answer["input_ids"])
            labels.append([-100] * len(prompt) + answer["input_ids"])
            walks.append([False] * len(prompt) + [end <= example.walk_chars for _, end in answer["offset_mapping"]])
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        inputs = {
            "input_ids": input_ids,
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
            "labels": torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels]),
            "mm_token_type_ids": (input_ids == self.processor.image_token_id).to(torch.int32),
            "pixel_values": encoded["pixel_values"], "image_grid_thw": encoded["image_grid_thw"],
        }
        return inputs, torch.tensor([w + [False] * (width - len(w)) for w in walks])


def weighted_answer_loss(logits: Any, labels: Any, walk_mask: Any, walk_weight: float) -> Any:
    """Next-token cross-entropy on the answer tokens, walk tokens counting `walk_weight` each and the rest 1;
    with walk_weight 1 this is exactly the model's own token-mean loss."""
    import torch

    targets, walk = labels[:, 1:], walk_mask[:, 1:]
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets.flatten(),
                                               ignore_index=-100, reduction="none").view_as(targets)
    weights = torch.where(walk, walk_weight, 1.0) * (targets != -100)
    return (losses * weights).sum() / weights.sum()


def batch_stream(mixture: dict[PromptKind, float], rng: random.Random, corrupt: float,
                 items: list[tuple[Scene, Question]], size: int, conclusion_errors: float = 0.0,
                 wrong_references: float = 0.0, recorded: dict[int, str] | None = None,
                 recorded_share: float = 0.0) -> Any:
    """An endless, seeded stream of (kind, examples) batches drawn from `items`. A batch holds one prompt
    kind: lengths within a kind are close, so padding wastes little (a third of the compute of mixed
    batches). `recorded` (item index -> the small model's own reasoning for it): `recorded_share` of RT
    examples are those items with that reasoning as the reference."""
    kinds, weights = zip(*mixture.items())
    recorded = recorded or {}
    with_reasoning = sorted(recorded)
    while True:
        kind = rng.choices(kinds, weights)[0]
        if kind == "RT" and with_reasoning and recorded_share:  # a branch of its own: older streams stay the same
            examples = []
            for _ in range(size):
                index = (with_reasoning[rng.randrange(len(with_reasoning))] if rng.random() < recorded_share
                         else rng.randrange(len(items)))
                scene, question = items[index]
                examples.append(make_example(scene, question, kind, rng, corrupt, conclusion_errors,
                                             wrong_references, recorded.get(index)))
            yield kind, examples
            continue
        picks = [items[rng.randrange(len(items))] for _ in range(size)]
        yield kind, [make_example(scene, question, kind, rng, corrupt, conclusion_errors, wrong_references)
                     for scene, question in picks]


def recorded_references(path: Path, items: list[tuple[Scene, Question]]) -> dict[int, str]:
    """Training-pool index -> the small model's recorded reasoning for that item. A key outside the pool
    (references recorded on another world or split) is an error: it would silently train on nothing."""
    index = {item_key(scene, question): i for i, (scene, question) in enumerate(items)}
    recorded = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        row = json.loads(line)
        if row["key"] not in index:
            raise SystemExit(f"{path}:{number}: item {row['key']!r} is not in this training pool; record the "
                             "references again on this world's train split (training/record_small_references.py)")
        recorded[index[row["key"]]] = row["reference"]
    return recorded


def phase_steps(phases: tuple[Phase, ...], steps: int) -> list[int]:
    """Each phase's whole number of steps; the last takes what rounding leaves, so they sum to `steps`."""
    counts = [round(phase.share * steps) for phase in phases[:-1]]
    return counts + [steps - sum(counts)]


def cell_labels(scenes: list[Scene]) -> Any:
    """Per image token (one per grid cell, row-major): content class (0 empty, 1.. colour x shape), row, column."""
    import torch

    classes = {cell: i + 1 for i, cell in enumerate((c, s) for c in COLORS for s in SHAPES)}
    content = [classes[cell] if cell else 0 for scene in scenes for cell in scene]
    positions = [k for _ in scenes for k in range(GRID * GRID)]
    return (torch.tensor(content), torch.tensor([k // GRID for k in positions]),
            torch.tensor([k % GRID for k in positions]))


def pretrain_vision(model: Any, batcher: Batcher, image_processor: Any, args: argparse.Namespace, seed: int,
                    device: str) -> dict[str, float]:
    """Stage 1, as real VLMs start from a pretrained vision encoder: teach the vision tower (and merger) to say
    what is in each grid cell and where, through linear heads on its output tokens that are then discarded.
    From scratch, the language-modelling loss alone barely moves the vision tower within a CPU budget (without
    this stage both models stay at chance on the S prompt after 1400 steps); with it the pair learns to see."""
    import torch

    rng = random.Random(seed)
    hidden = model.config.text_config.hidden_size
    heads = torch.nn.ModuleList([torch.nn.Linear(hidden, n) for n in (1 + len(COLORS) * len(SHAPES), GRID, GRID)])
    heads = heads.to(device)
    parameters = list(model.model.visual.parameters()) + list(heads.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=args.vision_lr, weight_decay=0.01)
    # warmup, then cosine down to a tenth, as stage 2: at a constant lr the large tower learns the cluttered
    # drawing (95 % of cells at step 2850) and then diverges (65 % at 2900, 79 % at step 3000)
    warmup = min(100, args.vision_steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                 lambda step: _lr_factor(step, args.vision_steps, warmup))
    accuracy: dict[str, float] = {}
    for step in range(1, args.vision_steps + 1):
        scenes = [random_scene(rng) for _ in range(args.vision_batch)]
        pixels = image_processor(images=[batcher.image(s) for s in scenes], return_tensors="pt")
        tokens = model.model.visual(pixels["pixel_values"].to(device), grid_thw=pixels["image_grid_thw"].to(device),
                                    return_dict=True).pooler_output
        targets = [t.to(device) for t in cell_labels(scenes)]
        logits = [head(tokens) for head in heads]
        loss = sum(torch.nn.functional.cross_entropy(lg, tg) for lg, tg in zip(logits, targets))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == args.vision_steps:
            accuracy = {n: round(float((lg.argmax(-1) == tg).float().mean()), 4)
                        for n, lg, tg in zip(("content", "row", "column"), logits, targets)}
            print(f"[vision] step {step}/{args.vision_steps} loss {loss.item():.4f} accuracy {accuracy}",
                  file=sys.stderr, flush=True)
    return accuracy


def train_model(name: str, out: Path, tokenizer: Any, image_processor: Any, args: argparse.Namespace,
                exclude: frozenset[str]) -> dict[str, Any]:
    import torch
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    size, steps = SIZES[name], (args.steps_small if name == SMALL else args.steps_large)
    torch.manual_seed(size["seed"] + args.seed)
    config = build_config(size, tokenizer, VISION_SIZES[name])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batcher = Batcher(tokenizer, image_processor)
    previous: dict[str, Any] = {}
    if args.init_from:
        # continue training a saved checkpoint (stage 2 only unless --vision-again; its log is kept under "previous")
        model = Qwen3VLForConditionalGeneration.from_pretrained(args.init_from / name).to(device).train()
        previous = json.loads((args.init_from / name / "training_log.json").read_text())
    else:
        model = Qwen3VLForConditionalGeneration(config).to(device).train()  # type: ignore[arg-type]
    # stage 1 from scratch, or again on a checkpoint's tower when the world's images changed (e.g. a new drawing)
    vision_pretraining, vision_accuracy, vision_s = previous.get("vision_pretraining"), {}, 0.0
    if not args.init_from or args.vision_again:
        vision_started = time.perf_counter()
        vision_accuracy = pretrain_vision(model, batcher, image_processor, args, size["seed"] + args.seed, device)
        vision_s, vision_pretraining = time.perf_counter() - vision_started, None
    parameters = sum(p.numel() for p in model.parameters())
    lr = args.lr_small if name == SMALL else args.lr_large
    # stage 2 keeps the stage-1 vision tower frozen (merger and deepstack mergers train): while the language
    # model still ignores the image, its gradients through the tower are noise that wipes out what stage 1
    # taught (training the tower in stage 2 too leaves S at chance after 500 steps)
    for parameter in model.model.visual.parameters():
        parameter.requires_grad = not args.freeze_vision
    for module in (model.model.visual.merger, *model.model.visual.deepstack_merger_list):
        for parameter in module.parameters():
            parameter.requires_grad = True
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, steps, args.warmup))
    rng, items = random.Random(size["seed"] + args.seed), generate_items("train", args.pool, exclude)
    phases = curriculum(name) if args.curriculum else (
        Phase("mixed", 1.0, args.mixture or MIXTURES[name], walk_weight=args.walk_weight),)
    schedule_of_phases = [phase for phase, n in zip(phases, phase_steps(phases, steps)) for _ in range(n)]
    recorded = recorded_references(args.recorded_references, items) if args.recorded_references else {}
    streams = {phase.name: batch_stream(phase.mixture, rng, args.corrupt, items, args.batch, args.conclusion_errors,
                                        args.wrong_references, recorded, args.recorded_share)
               for phase in phases}
    log: list[dict[str, Any]] = []
    started, smoothed = time.perf_counter(), None
    per_kind: dict[str, float] = {}
    for step, phase in enumerate(schedule_of_phases, start=1):
        kind, examples = next(streams[phase.name])
        inputs, walk_mask = batcher.encode(examples)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        labels = inputs.pop("labels")
        loss = weighted_answer_loss(model(**inputs).logits, labels, walk_mask.to(device), phase.walk_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        smoothed = loss.item() if smoothed is None else 0.95 * smoothed + 0.05 * loss.item()
        per_kind[kind] = loss.item() if kind not in per_kind else 0.8 * per_kind[kind] + 0.2 * loss.item()
        if step % args.log_every == 0 or step == steps:
            elapsed = time.perf_counter() - started
            kinds = {k: round(v, 4) for k, v in sorted(per_kind.items())}
            log.append({"step": step, "phase": phase.name, "loss": round(loss.item(), 4),
                        "smoothed_loss": round(smoothed, 4), "loss_by_kind": kinds, "elapsed_s": round(elapsed, 1)})
            print(f"[{name}] step {step}/{steps} ({phase.name}) loss {smoothed:.4f} {kinds} "
                  f"({elapsed / 60:.1f} min)", file=sys.stderr, flush=True)
        if args.save_phases and step < steps and schedule_of_phases[step].name != phase.name:
            # a snapshot at each phase boundary, to measure what each phase taught (diagnose_shapes_pair.py)
            save_checkpoint(out / f"{name}-after-{phase.name.replace(' ', '-')}", model, tokenizer, image_processor)
    model = model.eval().to("cpu")
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, do_sample=False)
    target = out / name
    save_checkpoint(target, model, tokenizer, image_processor)
    summary = {"name": name, "command": "python " + " ".join(sys.argv), "parameters": parameters, "steps": steps, "batch_size": args.batch, "lr": lr,
               "seed": args.seed, "device": device, "threads": torch.get_num_threads(),
               "train_s": round(time.perf_counter() - started, 1), "final_smoothed_loss": round(smoothed or 0.0, 4),
               "final_loss_by_kind": {k: round(v, 4) for k, v in sorted(per_kind.items())},
               "curriculum": [{"phase": phase.name, "steps": n, "mixture": phase.mixture,
                               "walk_token_weight": phase.walk_weight}
                              for phase, n in zip(phases, phase_steps(phases, steps))],
               "corrupt_reference_share": args.corrupt, "conclusion_error_share": args.conclusion_errors,
               "wrong_reference_share": args.wrong_references,
               "recorded_references": {"file": str(args.recorded_references), "items": len(recorded),
                                       "share_of_rt": args.recorded_share} if recorded else None,
               "objects_per_scene": list(OBJECTS_PER_SCENE), "drawing": DRAWING,
               "vision_tower_frozen_in_stage_2": args.freeze_vision,
               "vision_pretraining": vision_pretraining or {
                   "steps": args.vision_steps, "batch_images": args.vision_batch, "lr": args.vision_lr,
                   "lr_schedule": "warmup, cosine to a tenth",
                   "train_s": round(vision_s, 1), "final_cell_accuracy": vision_accuracy,
                   "continued_tower": bool(args.init_from)},
               "total_stage2_steps": steps + previous.get("total_stage2_steps", previous.get("steps", 0)),
               "total_train_s": round(time.perf_counter() - started + previous.get("total_train_s",
                                                                                   previous.get("train_s", 0.0)), 1),
               "log": log, "continued_from": previous or None}
    (target / "training_log.json").write_text(json.dumps(summary, indent=1))
    (target / "mai_builtin.json").write_text(json.dumps({"name": name, "builder_version": "trained-1"}))
    return summary


def parse_mixture(text: str) -> dict[PromptKind, float]:
    """`S=0.5,R=0.2,RT=0.3` -> {"S": 0.5, "R": 0.2, "RT": 0.3}; kinds must be ones the training targets know."""
    mixture: dict[PromptKind, float] = {}
    for part in text.split(","):
        kind, _, share = part.partition("=")
        if kind.strip() not in ("S", "E", "R", "S2", "RT"):
            raise argparse.ArgumentTypeError(f"unknown prompt kind {kind.strip()!r} (use S, E, R, S2, RT)")
        try:
            mixture[kind.strip()] = float(share)  # type: ignore[index]
        except ValueError:
            raise argparse.ArgumentTypeError(f"share of {kind.strip()} must be a number, got {share!r}") from None
    if sum(mixture.values()) <= 0:
        raise argparse.ArgumentTypeError("the shares must add up to more than 0")
    return mixture


def load_or_build_tokenizer(args: argparse.Namespace, exclude: frozenset[str]) -> Any:
    """A continued run keeps its checkpoint's tokenizer: one rebuilt from the corpus would differ as soon as
    the traces change wording, and the embeddings would then read the wrong tokens."""
    if args.init_from:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(args.init_from / args.models.split(",")[0])
    return build_tokenizer(args.out / "_tokenizer", vocab_size=640,
                           corpus=corpus(generate_items("train", 4000, exclude, seed=99)))


def save_checkpoint(directory: Path, model: Any, tokenizer: Any, image_processor: Any) -> None:
    """A directory `from_pretrained` (and the pipeline) can load: weights, tokenizer, image processor."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    image_processor.save_pretrained(directory)


def _lr_factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/shapes-pair"))
    parser.add_argument("--models", default=f"{SMALL},{LARGE}", help="which of the pair to train")
    parser.add_argument("--steps-small", type=int, default=2500)
    parser.add_argument("--steps-large", type=int, default=1800)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr-small", type=float, default=2e-3)
    parser.add_argument("--lr-large", type=float, default=1.5e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--vision-steps", type=int, default=300, help="stage 1: vision tower on cell labels")
    parser.add_argument("--vision-batch", type=int, default=64, help="images per stage-1 step")
    parser.add_argument("--vision-lr", type=float, default=3e-3)
    parser.add_argument("--init-from", type=Path, default=None,
                        help="continue from <dir>/<model name> (a previous --out): stage 2 only, same tokenizer; with "
                             "--no-curriculum (and --mixture) unless the walk phase should run again")
    parser.add_argument("--vision-again", action="store_true",
                        help="with --init-from: run stage 1 (--vision-steps) again on the checkpoint's tower first, "
                             "for a world whose images changed; --steps-small/--steps-large 0 stops after it")
    parser.add_argument("--freeze-vision", action=argparse.BooleanOptionalAction, default=True,
                        help="keep the stage-1 vision tower frozen in stage 2 (its mergers still train)")
    parser.add_argument("--curriculum", action=argparse.BooleanOptionalAction, default=True,
                        help="stage 2 as walk -> conclusion -> all kinds (see `curriculum`); off: one flat mixture")
    parser.add_argument("--mixture", type=parse_mixture, default=None,
                        help="with --no-curriculum: the prompt-kind shares, e.g. S=0.5,R=0.2,RT=0.3 (default: MIXTURES)")
    parser.add_argument("--walk-weight", type=float, default=1.0,
                        help="with --no-curriculum: loss weight of the grid-walk tokens of R answers (the rest "
                             "weigh 1); below 1 puts the gradient on the conclusions once the walk is learned")
    parser.add_argument("--save-phases", action="store_true",
                        help="also save <out>/<name>-after-<phase>/ at each curriculum phase boundary")
    parser.add_argument("--corrupt", type=float, default=0.4, help="share of S2/RT references with one error")
    parser.add_argument("--conclusion-errors", type=float, default=0.0,
                        help="share of those erring references whose grid walk is right and whose conclusion is "
                             "not (a trained small model's kind of error; teaches RT to check the conclusion too)")
    parser.add_argument("--wrong-references", type=float, default=0.0,
                        help="share of RT references whose one misperceived cell changes the answer, so that "
                             "copying a reference's conclusion does not pay (the rest follow --corrupt)")
    parser.add_argument("--recorded-references", type=Path, default=None,
                        help="JSONL of {key, reference}: the small model's own R reasoning on training items "
                             "(training/record_small_references.py), used as RT references with their real errors")
    parser.add_argument("--recorded-share", type=float, default=0.5,
                        help="with --recorded-references: share of RT examples drawn from those items")
    parser.add_argument("--pool", type=int, default=60000, help="distinct training items")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    exclude = held_out_keys(SPLIT_SIZES)
    tokenizer = load_or_build_tokenizer(args, exclude)
    image_processor = build_image_processor(IMAGE_PX * IMAGE_PX, IMAGE_PX * IMAGE_PX)
    for name in args.models.split(","):
        summary = train_model(name, args.out, tokenizer, image_processor, args, exclude)
        print(json.dumps({k: v for k, v in summary.items() if k != "log"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
