"""The decision per sample, its score and the run's metrics, written to the store: the work of the
`route-and-score` task (tasks/materialize.py), importable without Prefect (a run with nothing to compute routes and
scores without a flow engine, mai/pipeline.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from mai import cascade
from mai.evals.base import Benchmark, Metric, ScoredSample
from mai.evals.registry import get_benchmark
from mai.manifest import RouteCounts, RunScores, StageMaps
from mai.plan import RunPlan
from mai.run.answers import load_stage_answers
from mai.storage.generations import shared_store
from mai.storage.paths import Home
from mai.storage.rows import MetricRecord, ScoreRecord
from mai.storage.runs import write_metrics, write_routes, write_scores
from mai.storage.samples import read_shard
from mai.types import STAGE_NAMES, RouteDecision, Sample, StageName


def score_run(plan: RunPlan, shard_paths: list[str], stage_maps: dict[str, StageMaps]) -> RunScores:
    """Writes the run's route rows, scores and metrics; returns the summary the CLI prints."""
    home = Home.at(plan.home)
    benchmark = get_benchmark(plan.benchmark)
    rows: list[dict[str, Any]] = []
    scored: list[ScoredSample] = []
    samples = [sample for shard_path in shard_paths for sample in read_shard(home.root / shard_path)]
    # every shard's answers in one read per stage (not one per shard and stage): sample ids are unique in a run
    merged: StageMaps = {}
    for shard_path in shard_paths:
        for stage, outputs in stage_maps[shard_path].items():
            merged.setdefault(stage, {}).update(outputs)
    answers = load_stage_answers(shared_store(plan.home), benchmark, [s for s in samples if s.error is None],
                                 merged, plan.stages, plan.models)
    for sample in samples:
        if sample.error is not None:
            rows.append({"run_id": plan.run_id, "sample_id": sample.sample_id, "shard": sample.shard,
                         "category": sample.category, "route": "ERROR", "reference": sample.answer, "score": None,
                         "parsed": False, "error": sample.error})
            continue
        decision = cascade.route(sample, plan.config.mode, answers, benchmark)
        score = benchmark.score(decision.final_answer, sample, benchmark.profiles[0])
        scored.append(ScoredSample(sample, decision.final_answer, score))
        rows.append(_route_row(plan.run_id, sample, decision, score))
    profile = benchmark.profiles[0]
    metric_rows = metric_rows_for(plan.run_id, benchmark, benchmark.aggregate(scored, profile), profile)
    write_routes(home, plan.run_id, rows)
    write_scores(home, plan.run_id, profile, score_rows_for(plan.run_id, profile, scored, rows))
    write_metrics(home, plan.run_id, profile, metric_rows)
    counts = Counter(r["route"] for r in rows)
    return {
        "routes": RouteCounts(MV1=counts["MV1"], MV2=counts["MV2"], RT=counts["RT"], SINGLE=counts["SINGLE"],
                              ERROR=counts["ERROR"]),
        "scorer_profile": profile,
        "metrics": [{"metric": m["metric"], "subset": m["subset"], "value": m["value"], "n": m["n"]}
                    for m in metric_rows],
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


def metric_rows_for(run_id: str, benchmark: Benchmark, metrics: list[Metric], profile: str) -> list[MetricRecord]:
    return [
        {"run_id": run_id, "benchmark": benchmark.name, "metric": m.name, "subset": m.subset, "value": m.value,
         "n": m.n, "unit": m.unit, "scorer_profile": profile}
        for m in metrics
    ]


def score_rows_for(run_id: str, profile: str, scored: list[ScoredSample], routes: Sequence[Mapping[str, Any]]
                   ) -> list[ScoreRecord]:
    final = {r["sample_id"]: r.get("final_gen_id") for r in routes}
    return [{"run_id": run_id, "sample_id": s.sample.sample_id, "scorer_profile": profile, "parsed": s.parsed,
             "score": s.score, "final_gen_id": final.get(s.sample.sample_id)} for s in scored]


