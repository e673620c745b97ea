"""`mai rescore`: score a stored run again under another scorer profile, without running any model. A store
lookup, scoring and two writes: no Prefect flow, so it needs no Prefect server (about a second on a fresh machine)."""

from __future__ import annotations

from typing import TypedDict

from mai.errors import ConfigError
from mai.evals.registry import get_benchmark
from mai.manifest import MetricSummary
from mai.run.routes import metric_rows_for, score_rows_for
from mai.scoring import check_profile, score_outputs
from mai.storage.benchmark_specs import register_recorded_specs
from mai.storage.catalog import build_catalog
from mai.storage.generations import read_texts
from mai.storage.paths import Home
from mai.storage.runs import is_complete, read_manifest, read_routes, write_metrics, write_scores
from mai.storage.samples import read_shard


class Rescored(TypedDict):
    run_id: str
    scorer_profile: str
    metrics: list[MetricSummary]


def rescore_run(run_id: str, profile: str, home: str | None = None) -> Rescored:
    """Re-parses each sample's final output with the profile's parser, scores and aggregates it, and
    stores the scores and metrics next to the run's others (one file per profile)."""
    root = Home.at(home)
    if not is_complete(root, run_id):
        raise ConfigError(f"no completed run '{run_id}' in {root.root} (see `mai sql \"SELECT run_id FROM runs\"`)")
    manifest = read_manifest(root, run_id)
    register_recorded_specs(root)  # a spec benchmark's name means what its spec said (recorded in the store)
    benchmark = get_benchmark(str(manifest["config"]["benchmark"]))
    chosen = check_profile(benchmark, profile)
    samples = {s.sample_id: s for path in manifest["shard_paths"] for s in read_shard(root.root / path)}
    routes = [r for r in read_routes(root, run_id) if r["route"] != "ERROR"]
    texts = read_texts(root, (r["final_gen_id"] for r in routes))
    outputs = [(samples[r["sample_id"]], texts.get(r["final_gen_id"])) for r in routes]
    scored, metrics = score_outputs(benchmark, outputs, chosen)
    write_scores(root, run_id, chosen, score_rows_for(run_id, chosen, scored, routes))
    rows = metric_rows_for(run_id, benchmark, metrics, chosen)
    write_metrics(root, run_id, chosen, rows)
    build_catalog(root)
    return {"run_id": run_id, "scorer_profile": chosen,
            "metrics": [{"metric": m["metric"], "subset": m["subset"], "value": m["value"], "n": m["n"]}
                        for m in rows]}
