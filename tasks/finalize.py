"""`route_and_score`: the decision per sample, its score, the run's metrics. `write_run_manifest`: last."""

from __future__ import annotations

from typing import Any

from mai.storage.paths import Home
from mai.storage.runs import write_manifest, write_metrics, write_routes, write_scores
from mai.storage.samples import read_shard
from mai.tasks.answers import load_stage_answers
from mai.tasks.generate import store_for
from mai.tasks.jobs import RunContext, StageMaps
from prefect import task
from prefect.cache_policies import NO_CACHE

from mai import cascade
from mai.evals.base import Benchmark, Metric, ScoredSample
from mai.evals.registry import get_benchmark
from mai.types import STAGE_NAMES, RouteDecision, Sample, StageName


@task(name="route-and-score", cache_policy=NO_CACHE)
def route_and_score(context: RunContext, shard_paths: list[str], stage_maps: dict[str, StageMaps]) -> dict[str, Any]:
    """Writes the run's route rows and metrics; returns the summary the CLI prints."""
    home = Home.at(context.home)
    benchmark = get_benchmark(context.benchmark)
    rows: list[dict[str, Any]] = []
    scored: list[ScoredSample] = []
    for shard_path in shard_paths:
        samples = read_shard(home.root / shard_path)
        valid = [s for s in samples if s.error is None]
        answers = load_stage_answers(store_for(context.home), benchmark, valid, stage_maps[shard_path],
                                     context.stages, context.models)
        for sample in samples:
            if sample.error is not None:
                rows.append(_error_row(context.run_id, sample))
                continue
            decision = cascade.route(sample, context.mode, answers, benchmark)
            score = benchmark.score(decision.final_answer, sample, benchmark.profiles[0])
            scored.append(ScoredSample(sample, decision.final_answer, score))
            rows.append(_route_row(context.run_id, sample, decision, score))
    profile = benchmark.profiles[0]
    metric_rows = metric_rows_for(context.run_id, benchmark, benchmark.aggregate(scored, profile), profile)
    write_routes(home, context.run_id, rows)
    write_scores(home, context.run_id, profile, score_rows_for(context.run_id, profile, scored, rows))
    write_metrics(home, context.run_id, profile, metric_rows)
    routes = [r["route"] for r in rows]
    return {
        "routes": {label: routes.count(label) for label in ("MV1", "MV2", "RT", "SINGLE", "ERROR")},
        "scorer_profile": profile,
        "metrics": [{k: m[k] for k in ("metric", "subset", "value", "n")} for m in metric_rows],
        "errors": [{"sample_id": r["sample_id"], "error": r["error"]} for r in rows if r["error"]],
    }


def _route_row(run_id: str, sample: Sample, decision: RouteDecision, score: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": run_id, "sample_id": sample.sample_id, "shard": sample.shard, "category": sample.category,
        "route": decision.route, "final_answer": decision.final_answer, "final_gen_id": decision.final_gen_id,
        "reference": sample.answer, "score": score, "parsed": decision.final_answer is not None,
        "agreement_rule": decision.agreement_rule, "error": None,
    }
    stage: StageName
    for stage in STAGE_NAMES:
        row[f"answer_{stage}"] = decision.answers.get(stage)
        row[f"gen_{stage}"] = decision.gen_ids.get(stage)
    return row


def _error_row(run_id: str, sample: Sample) -> dict[str, Any]:
    return {"run_id": run_id, "sample_id": sample.sample_id, "shard": sample.shard, "category": sample.category,
            "route": "ERROR", "reference": sample.answer, "score": None, "parsed": False, "error": sample.error}


def metric_rows_for(run_id: str, benchmark: Benchmark, metrics: list[Metric], profile: str) -> list[dict[str, Any]]:
    return [
        {"run_id": run_id, "benchmark": benchmark.name, "metric": m.name, "subset": m.subset, "value": m.value,
         "n": m.n, "unit": m.unit, "scorer_profile": profile}
        for m in metrics
    ]


def score_rows_for(run_id: str, profile: str, scored: list[ScoredSample], routes: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    final = {r["sample_id"]: r.get("final_gen_id") for r in routes}
    return [{"run_id": run_id, "sample_id": s.sample.sample_id, "scorer_profile": profile, "parsed": s.parsed,
             "score": s.score, "final_gen_id": final.get(s.sample.sample_id)} for s in scored]


@task(name="write-run-manifest", cache_policy=NO_CACHE)
def write_run_manifest(context: RunContext, manifest: dict[str, Any], row: dict[str, Any]) -> str:
    return str(write_manifest(Home.at(context.home), context.run_id, manifest, row))
