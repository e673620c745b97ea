"""`checked_shards`: a sample whose prompt does not fit a model of the run becomes a recorded per-sample error before
any model runs, like a row that cannot be read (mai/evals/loading.py): its route is ERROR with the reason, the other
samples run, and a re-run reports it the same way without trying it again.

A prompt fits when, for every generating stage of the plan, on the stage's model:
- its tokens (text and image tokens, as the model's processor counts them: mai/backends/prompt_length.py) and the
  upstream output it carries (S2 and RT read the small model's reasoning: at most the R budget) are at most
  `--max-prompt-tokens` (when set), and
- those tokens, that upstream output and the stage's own output budget fit the model's context
  (`max_position_embeddings` of its text config; with the vLLM backend, also the `--max-model-len` of the servers it
  starts).
The upstream output is counted at its budget, not at what a model happens to write, so the decision is known before
anything runs and is the same in every run of the configuration.

The checked shards are the materialised ones, rewritten with the refused samples as error samples under
`<shard set>/prompts-<key>/` (below the `samples` view's files, which stay the loader's), where `key` names what the
decision depends on; a shard with no refused sample is used as it is (its path unchanged, so runs without such
samples keep their steps' cache keys). The decisions are store records with identities: per key, each sample's
decision by its content hash (`samples/<benchmark>/prompt-checks-<key>/*.json`), so any slice or sharding of
samples decided before is decided without counting again (and without loading a processor).

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
    sample whose prompt does not fit is replaced by its checked copy. Counts once per shard and configuration; after
    that, reads the decisions."""
    home = Home.at(plan.home)
    return [_checked_shard(plan, home, path, log or logging.getLogger("mai")) for path in shard_paths]


def _checked_shard(plan: RunPlan, home: Home, shard_path: str, log: Log) -> str:
    source = home.root / shard_path
    samples = read_shard(source)
    usable = [s for s in samples if s.error is None]
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
    if not refused:
        return shard_path
    checked = checked_shard_directory(source, plan) / source.name
    if not checked.exists():
        write_shard(checked, [_with_error(s, refused.get(s.sample_id)) for s in samples], plan.source)
    return str(checked.relative_to(home.root))


def decisions_directory(home: Home, plan: RunPlan) -> Path:
    """Where the decisions of the plan's check key are recorded (one file per checking call, never rewritten)."""
    return home.table_dir("samples") / plan.benchmark / f"prompt-checks-{check_key(plan)}"


def stored_decisions(home: Home, plan: RunPlan) -> dict[str, str | None]:
    """Sample content hash -> why its prompt does not fit (None: it fits), for every sample decided under the
    plan's check key."""
    decided: dict[str, str | None] = {}
    directory = decisions_directory(home, plan)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        decided |= json.loads(path.read_text())
    return decided


def _with_error(sample: Sample, reason: str | None) -> Sample:
    return sample if reason is None else replace(sample, error=reason)


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
