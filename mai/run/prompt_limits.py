"""`checked_shards`: a sample whose prompt does not fit a model of the run, or whose image asset is missing or damaged
in the store, becomes a recorded per-sample error before any model runs, like a row that cannot be read
(mai/evals/loading.py): its route is ERROR with the reason, the other samples run.

A prompt fits when, for every generating stage of the plan, on the stage's model:
- its tokens (text and image tokens, as the model's processor counts them: mai/backends/prompt_length.py) and the
  upstream output it carries (S2 and RT read the small model's reasoning: at most the R budget) are at most
  `--max-prompt-tokens` (when set), and
- those tokens, that upstream output and the stage's own output budget fit the model's context
  (`max_position_embeddings` of its text config; with the vLLM backend, also the `--max-model-len` of the servers it
  starts).
The upstream output is counted at its budget, not at what a model happens to write, so the decision is known before
anything runs and is the same in every run of the configuration; a re-run reports it the same way without trying it
again.

An image is checked on every run (storage/image_assets.py: it exists and its bytes hash to the sample's recorded
`image_sha256`; an asset whose stats are unchanged since it last hashed right is not hashed again). Its damage is not
a decision: `mai store verify --repair` moves the asset aside with its shard sets, and the next run materialises
them again and computes the samples. Before that, every usable sample's images are checked, so the prompt check
(which reads image headers) and the engines only ever open whole images. The partitions the run's stages write to
are checked too: a file in the place of one stops the run here, with one line, before any flow or model starts.

The checked shards are the materialised ones, rewritten with the refused samples as error samples under
`<shard set>/prompts-<key>/` (below the `samples` view's files, which stay the loader's), where `key` names what the
decision depends on (`prompts-<key>-images-<hash>/` where an image is damaged: `hash` names which and why, so a
copy made while an image was damaged is never used once it is whole again); a shard with no refused sample is used
as it is (its path unchanged, so runs without such samples keep their steps' cache keys). The decisions are store
records with identities: per key, each sample's decision by its content hash
(`samples/<benchmark>/prompt-checks-<key>/*.json`), so any slice or sharding of samples decided before is decided
without counting again (and without loading a processor).

No Prefect here: the `mai-run` flow calls it through the `limit-prompts` task (tasks/materialize.py), a run with
nothing to compute (mai/pipeline.py) directly.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from pathlib import Path

from mai.backends.prompt_length import PromptCounter, prompt_counter
from mai.evals.base import Benchmark
from mai.evals.registry import get_benchmark
from mai.files import write_atomically
from mai.identity import canonical_hash
from mai.pipeline import Log
from mai.plan import RunPlan
from mai.stages import build_request
from mai.storage.image_assets import asset_path, damaged_images
from mai.storage.partitions import check_folder
from mai.storage.paths import Home
from mai.storage.samples import read_shard, write_shard
from mai.types import Sample, StageAnswer, StageSpec

# bump when what is checked or how it is counted changes (a new key, so stores check their samples again)
PROMPT_CHECK_VERSION = "3"  # 2: the carried reasoning counts against --max-prompt-tokens; 3: a refusal gives
# the prompt's exact size below 100k characters (it gave a lower bound where the length alone was over the limit)
# the upstream output of an S2 / RT prompt as the check builds it: empty, its tokens are added at their budget
_NO_TEXT_YET = StageAnswer(gen_id="", text="", answer=None)


def checked_shards(plan: RunPlan, shard_paths: list[str], log: Log | None = None) -> list[str]:
    """The shard files the run uses (relative to the store root): `shard_paths`, except that a shard holding a
    sample whose prompt does not fit, or whose image is missing or damaged, is replaced by its checked copy. Counts
    once per shard and configuration; after that, reads the decisions. A partition the run writes to that is not a
    folder stops it here (`DamagedFileError`, one line)."""
    home = Home.at(plan.home)
    check_partitions(plan, home)
    log = log or logging.getLogger("mai")
    shards = {path: read_shard(home.root / path) for path in shard_paths}
    digests = [d for samples in shards.values() for s in samples if s.error is None for d in s.image_sha256]
    damaged = damaged_images(home.images, digests)
    for digest, reason in list(damaged.items())[:20]:
        log.warning("image %s is %s: its samples cannot run; `mai store verify --repair` moves it aside and the "
                    "next run materialises it again", asset_path(home.images, digest), reason)
    return [_checked_shard(plan, home, path, samples, damaged, log) for path, samples in shards.items()]


def check_partitions(plan: RunPlan, home: Home) -> None:
    """Every partition the run's stages write to is a folder (or not there yet): a file in its place would stop
    the run at its first write, inside a shard."""
    for stage in plan.stages:
        model = plan.models[stage.role]
        # storage/generations.py and storage/attention.py name these (the latter imports pyarrow.dataset and pandas)
        folders = [home.generations / model.slug / stage.prompt_kind] if stage.generates else \
            [home.table_dir("attention") / model.slug, home.table_dir("selections") / model.slug]
        for folder in folders:
            check_folder(folder, home.store)


def _checked_shard(plan: RunPlan, home: Home, shard_path: str, samples: list[Sample], damaged: dict[str, str],
                   log: Log) -> str:
    source = home.root / shard_path
    broken = {s.sample_id: _image_error(home, s, damaged) for s in samples
              if s.error is None and any(d in damaged for d in s.image_sha256)}
    usable = [s for s in samples if s.error is None and s.sample_id not in broken]
    decided = stored_decisions(home, plan)
    undecided = [s for s in usable if s.content_hash not in decided]
    if undecided:
        new = refused_samples(plan, undecided)
        record = {s.content_hash: new.get(s.sample_id) for s in undecided}
        write_atomically(decisions_directory(home, plan) / f"{uuid.uuid4().hex}.json", json.dumps(record))
        decided |= record
        for sample_id, why in list(new.items())[:20]:
            log.warning("sample %s cannot run: %s", sample_id, why)
    refused = {s.sample_id: reason for s in usable if (reason := decided[s.content_hash]) is not None}
    if not undecided:
        log.info("%s: prompt lengths checked before, %d sample(s) refused", source.name, len(refused))
    refused |= broken
    if not refused:
        return shard_path
    directory = checked_shard_directory(source, plan)
    if broken:
        directory = directory.with_name(f"{directory.name}-images-{canonical_hash(sorted(broken.items()))[:16]}")
    checked = directory / source.name
    if not checked.exists():
        write_shard(checked, [s if (refusal := refused.get(s.sample_id)) is None else replace(s, error=refusal)
                               for s in samples], plan.source)
    return str(checked.relative_to(home.root))


def _image_error(home: Home, sample: Sample, damaged: dict[str, str]) -> str:
    digest = next(d for d in sample.image_sha256 if d in damaged)
    return (f"its image {asset_path(home.images, digest)} is {damaged[digest]}: run `mai store verify --repair`, "
            "then run again (the sample is computed then)")


def decisions_directory(home: Home, plan: RunPlan) -> Path:
    """Where the decisions of the plan's check key are recorded (one file per checking call, never rewritten)."""
    return home.table_dir("samples") / plan.benchmark / f"prompt-checks-{check_key(plan)}"


def prompts_checked_before(plan: RunPlan) -> bool:
    """Whether any prompt of the plan's check key was checked before: a run whose were not (a new model, prompt or
    budget on this data) counts prompts for seconds before anything else, and computes."""
    directory = decisions_directory(Home.at(plan.home), plan)
    return directory.is_dir() and any(directory.glob("*.json"))


def stored_decisions(home: Home, plan: RunPlan) -> dict[str, str | None]:
    """Sample content hash -> why its prompt does not fit (None: it fits), for every sample decided under the
    plan's check key."""
    decided: dict[str, str | None] = {}
    directory = decisions_directory(home, plan)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        decided |= json.loads(path.read_text())
    return decided


def check_key(plan: RunPlan) -> str:
    """What the decisions depend on: the models (their files), the stages and their prompt kinds, the budgets, the
    configured limit and the backend's served context."""
    return canonical_hash([PROMPT_CHECK_VERSION, plan.benchmark, {role: m.slug for role, m in plan.models.items()},
                           [(s.name, s.role, s.prompt_kind, s.upstream) for s in plan.stages],
                           {kind: d.max_new_tokens for kind, d in plan.decodings.items()},
                           plan.config.max_prompt_tokens, {role: served_context(plan, role) for role in plan.models}])[:16]


def refused_samples(plan: RunPlan, samples: list[Sample]) -> dict[str, str]:
    """sample id -> why its prompt does not fit, for the usable samples (errors already are errors)."""
    benchmark = get_benchmark(plan.benchmark)
    refused: dict[str, str] = {}
    for stage in plan.stages:
        if not stage.generates or plan.models[stage.role].name_or_path.startswith("random:"):
            continue  # a token selection generates nothing; a random architecture has no checkpoint to count with
        for sample in samples:
            if sample.error is None and sample.sample_id not in refused:
                reason = prompt_refusal(plan, stage, benchmark, sample)
                if reason is not None:
                    refused[sample.sample_id] = reason
    return refused


def prompt_refusal(plan: RunPlan, stage: StageSpec, benchmark: Benchmark, sample: Sample) -> str | None:
    """Why `sample`'s prompt of `stage` does not fit the stage's model, or None when it does."""
    model = plan.models[stage.role]
    counter = prompt_counter(model)
    own, upstream = plan.decodings[stage.prompt_kind].max_new_tokens, upstream_budget(plan, stage)
    context, context_source = _context(plan, stage, counter)
    room = context - own - upstream
    configured = plan.config.max_prompt_tokens
    # the prompt as it runs carries the upstream output: it counts against the configured limit as against the context
    limit = min(room, configured - upstream) if configured is not None else room
    request = build_request(stage, sample, benchmark, model, plan.decodings[stage.prompt_kind],
                            _NO_TEXT_YET if stage.upstream else None, plan.backend_ids.get(stage.role))
    size = counter.count(request.prompt, max(limit, 0))
    if size.tokens <= limit:
        return None
    tokens = (f"{size.tokens} tokens" if size.exact else
              f"{len(request.prompt.text)} characters (at least {size.tokens} tokens; a text this long is not "
              "tokenized)")
    prompt = f"its {stage.prompt_kind} prompt for the {stage.role} model has {tokens}, image tokens included"
    carried = f", the reasoning it reads (up to {upstream})" if upstream else ""
    if configured is not None and size.tokens + upstream > configured:
        with_reasoning = f" (with the reasoning it reads, up to {upstream}: {size.tokens + upstream})" if upstream else ""
        return f"{prompt}{with_reasoning}, over --max-prompt-tokens {configured}"
    return (f"{prompt}; with its output budget ({own}){carried} that is over {context_source} of {context} tokens "
            "(shorten the budgets or use a model with a longer context)")


def upstream_budget(plan: RunPlan, stage: StageSpec) -> int:
    """The most tokens of upstream output a stage's prompt carries: the budget of the generating stage it reads
    (through sparse RT's token selection, which keeps a part of the reasoning)."""
    by_name = {s.name: s for s in plan.stages}
    name = stage.upstream
    while name is not None and not by_name[name].generates:
        name = by_name[name].upstream
    return plan.decodings[by_name[name].prompt_kind].max_new_tokens if name is not None else 0


def _context(plan: RunPlan, stage: StageSpec, counter: PromptCounter) -> tuple[int, str]:
    served = served_context(plan, stage.role)
    if served is not None and served < counter.context_length:
        return served, "the vLLM server's --max-model-len"
    return counter.context_length, "the model's context"


def served_context(plan: RunPlan, role: str) -> int | None:
    if plan.config.backend != "vllm":
        return None
    from mai.backends.vllm_backend import served_context_length

    return served_context_length(plan.config.vllm_urls.get(role))


def checked_shard_directory(shard_path: Path, plan: RunPlan) -> Path:
    """Where `checked_shards` keeps the checked copy of a shard and its decisions."""
    return shard_path.parent / f"prompts-{check_key(plan)}"
