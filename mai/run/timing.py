"""`mai time RUN [RUN ...]`: re-time stored runs in one regime (docs/latency.md).

A stored output's time is a fact about the run that computed it: its batch, machine and load. To compare runs'
times, this recomputes, in this one process (one machine, device, engine and batch sizes), the outputs each run
uses, batched as a fresh run of it would batch them (per shard, stage after stage, ordered by prompt size, the
batch size of each prompt kind), checks that each recomputed output is token for token the stored one, and stores
the times as a timing set (table `timings`). Stored outputs are never replaced. Each run starts with empty prefix
and image caches, as a fresh process would, after one untimed warm-up call per model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict, cast

from mai.backends import prefix_kv
from mai.backends.base import Engine
from mai.backends.processor import PROCESSED_IMAGES
from mai.backends.registry import get_engine
from mai.backends.transformers_backend import TransformersEngine
from mai.config import RunConfig
from mai.errors import ConfigError
from mai.host import host_name
from mai.plan import RunPlan
from mai.provenance import hardware
from mai.run.generate import by_prompt_size
from mai.storage.catalog import build_catalog, connect
from mai.storage.latency import check_name
from mai.storage.parquet import write_rows
from mai.storage.paths import Home
from mai.storage.rows import TimingRow
from mai.storage.runs import is_complete, read_manifest
from mai.storage.samples import read_shard
from mai.types import STAGE_NAMES, ChatPrompt, Decoding, GenRequest, GenResult, PromptKind, Role, StageName

KINDS: tuple[PromptKind, ...] = ("S", "R", "S2", "RT")


class RunTiming(TypedDict):
    run_id: str
    outputs: int
    identical: int
    measured_s: float


class TimingSummary(TypedDict):
    timing_set: str
    batch_limits: str
    runs: list[RunTiming]


@dataclass(frozen=True)
class Used:
    """One output a run uses, as stored: what rebuilds its request and what the recomputation must equal."""

    stage: str
    shard: int
    request: GenRequest
    kind: PromptKind
    tokens: tuple[int, ...]


# the columns of the used generations, in the order `_used` reads them
_USED = f"""
    SELECT r.stage, r.shard, g.gen_id, g.sample_id, g.prompt_kind, g.prompt_text, g.max_new_tokens, g.min_new_tokens,
           g.template, g.upstream_gen_id, g.output_token_ids
    FROM (UNPIVOT (SELECT run_id, sample_id, shard, {", ".join(f"gen_{s}" for s in STAGE_NAMES)} FROM routes
                   WHERE run_id = ? AND error IS NULL)
          ON {", ".join(f"gen_{s}" for s in STAGE_NAMES)} INTO NAME stage VALUE gen_id) r
    JOIN generations g USING (gen_id)
"""


def time_runs(home: Home, run_ids: list[str], name: str | None = None,
              batch_sizes: dict[str, int] | None = None) -> TimingSummary:
    """Re-time `run_ids` as one timing set named `name` (default `time-<UTC time>`) with `batch_sizes` per prompt
    kind (default: the runs' own, which must agree)."""
    if not run_ids:
        raise ConfigError("name at least one run to time")
    name = check_name(name or datetime.now(UTC).strftime("time-%Y%m%d-%H%M%S"), "timing set")
    if (home.table_dir("timings") / name).exists():
        raise ConfigError(f"timing set '{name}' exists: choose another --name")
    plans = {run_id: _plan(home, run_id) for run_id in dict.fromkeys(run_ids)}
    used = {run_id: _used(home, run_id) for run_id in plans}
    limits = _batch_limits(plans, used, batch_sizes or {})
    label = " ".join(f"{kind}={limits[kind]}" for kind in KINDS if kind in limits)
    _warm_up(plans, used)
    summary: list[RunTiming] = []
    for run_id, plan in plans.items():
        rows = _time_run(plan, used[run_id], limits, name, label)
        now = datetime.now(UTC)
        write_rows(home.table_dir("timings") / name / f"{run_id}.parquet", [{**r, "created_at": now} for r in rows],
                   "timings")
        summary.append({"run_id": run_id, "outputs": len(rows), "identical": sum(r["identical"] for r in rows),
                        "measured_s": sum(r["wall_s"] / r["batch_size"] for r in rows)})
    build_catalog(home)
    return {"timing_set": name, "batch_limits": label, "runs": summary}


def _plan(home: Home, run_id: str) -> RunPlan:
    """The stored run's plan (models as it resolved them); a sparse-RT run is refused (its attention captures are
    not re-timed)."""
    from mai.run.plan import prepare_run

    check_name(run_id, "run")
    if not is_complete(home, run_id):
        raise ConfigError(f"no completed run '{run_id}'")
    manifest = read_manifest(home, run_id)
    config = RunConfig.model_validate({**manifest["config"], "home": str(home.root)})
    if config.transfer == "sparse":
        raise ConfigError(f"run '{run_id}' uses sparse transfer: `mai time` does not re-time attention captures")
    return prepare_run(config, home, run_id, check_store=False)


def _batch_limits(plans: dict[str, RunPlan], used: dict[str, list[Used]], given: dict[str, int]
                  ) -> dict[PromptKind, int]:
    """One batch size per prompt kind the runs use, for the whole set: `given`, else the runs' own, which must
    agree."""
    limits: dict[PromptKind, int] = {}
    for kind in KINDS:
        sizes = {plan.config.batch_for(kind) for run_id, plan in plans.items()
                 if any(o.kind == kind for o in used[run_id])}
        if kind in given:
            limits[kind] = given[kind]
        elif len(sizes) == 1:
            limits[kind] = sizes.pop()
        elif sizes:
            raise ConfigError(f"the runs batch {kind} prompts by {sorted(sizes)}: one timing set batches alike, "
                              f"so pass --batch-size {kind}=N")
    return limits


def _used(home: Home, run_id: str) -> list[Used]:
    """Every output the run uses, once per shard and stage, with its request rebuilt from the stored prompt and
    the sample's images."""
    samples = {s.sample_id: s for path in read_manifest(home, run_id)["shard_paths"]
               for s in read_shard(home.root / path, home.images)}
    with connect(home) as connection:  # the id as a parameter, never pasted into the SQL
        rows = connection.execute(_USED, [run_id]).fetchall()
    found: dict[tuple[int, str, str], Used] = {}
    for stage, shard, gen_id, sample_id, kind, prompt, most, least, template, upstream, tokens in rows:
        request = GenRequest(gen_id=gen_id, sample_id=sample_id,
                             prompt=ChatPrompt(prompt, tuple(samples[sample_id].image_paths)),
                             decoding=Decoding(max_new_tokens=most, min_new_tokens=least or 0), template=template or "",
                             upstream_gen_id=upstream)
        found.setdefault((int(shard), str(stage), gen_id), Used(str(stage).removeprefix("gen_"), int(shard), request,
                                                                 cast(PromptKind, kind), tuple(tokens)))
    return list(found.values())


def _role(plan: RunPlan, stage: str) -> Role:
    if stage.startswith("single"):
        return plan.config.single_model
    return "large" if stage.endswith("large") else "small"


def _engine(plan: RunPlan, stage: str) -> Engine:
    role = _role(plan, stage)
    return get_engine(plan.models[role], plan.config.backend, plan.engine_options(role))


def _warm_up(plans: dict[str, RunPlan], used: dict[str, list[Used]]) -> None:
    """One untimed call per model, so that no run of the set pays the first call's one-off costs."""
    warmed: set[int] = set()
    for run_id, plan in plans.items():
        for output in used[run_id]:
            engine = _engine(plan, output.stage)
            if id(engine) not in warmed:
                warmed.add(id(engine))
                engine.generate([output.request], batch_size=1)


def _fresh_caches(plan: RunPlan, outputs: list[Used]) -> None:
    """Empty prefix and image caches, as a fresh process of the run starts with."""
    for engine in {id(e): e for e in (_engine(plan, o.stage) for o in outputs)}.values():
        if isinstance(engine, TransformersEngine):
            engine.prefixes = prefix_kv.PrefixStore(prefix_kv.PREFIX_CACHE_BYTES)
    PROCESSED_IMAGES.clear()


def _time_run(plan: RunPlan, outputs: list[Used], limits: dict[PromptKind, int], name: str,
              label: str) -> list[TimingRow]:
    """The run's outputs recomputed shard by shard, stage after stage (the order a run computes them)."""
    _fresh_caches(plan, outputs)
    groups: dict[tuple[int, int], list[Used]] = defaultdict(list)
    for output in outputs:
        groups[(output.shard, STAGE_NAMES.index(cast(StageName, output.stage)))].append(output)
    where = {"host": host_name(), "hardware": hardware()}
    rows: list[TimingRow] = []
    for key in sorted(groups):
        group = {o.request.gen_id: o for o in groups[key]}
        first = next(iter(group.values()))
        requests = by_prompt_size([o.request for o in group.values()])
        for result in _engine(plan, first.stage).generate(requests, limits[first.kind]):
            rows.append(_timing_row(name, plan, group[result.gen_id], result, label, where))
    return rows


def _timing_row(name: str, plan: RunPlan, output: Used, result: GenResult, label: str,
                where: dict[str, str]) -> TimingRow:
    import os

    return {"timing_set": name, "run_id": plan.run_id, "stage": output.stage, "gen_id": output.request.gen_id,
            "shard": output.shard, "batch_size": result.batch_size, "prompt_tokens": result.prompt_tokens,
            "output_tokens": result.output_tokens, "ttft_s": result.ttft_s, "decode_s": result.decode_s,
            "wall_s": result.wall_s, "identical": tuple(result.token_ids) == output.tokens, "host": where["host"],
            "hardware": where["hardware"], "cpu_count": os.cpu_count() or 1, "device": result.device,
            "engine": result.engine, "backend": plan.config.backend, "batch_limits": label,
            "load_start": result.load_start, "load_end": result.load_end}
