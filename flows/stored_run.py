"""A run answered wholly from the store, without Prefect's flow engine, and recorded in the Prefect API.

When every step of every shard of a run is stored (a re-run of a configuration, a re-score), the run is a store
lookup, routing and scoring, and the manifest: about a second of work. Importing Prefect and running one flow
through its engine costs more than that on its own (a flow that does nothing: about 3 s from process start on
the 2-core machine; docs/benchmarks.md, "Startup"), so such a run skips the engine: it is recorded as a `mai-run`
flow run named `mai-run/<run>` with the same tags, logs and artifacts (summary, routing and metric tables, the
report command), created Running before the scoring and set Completed (or Failed) after the manifest, over
Prefect's REST API (flows/prefect_rest.py). Everything else is the flow's own code: the same plan, stage maps,
routing, scores, manifest and catalog (tests/test_stored_run.py compares the two).

Only where `mai` serves the API itself (its local or temporary server) and the run has no workers; any other run,
or one with a single output missing, goes through the `mai-run` flow (flows/run.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import UTC, datetime

from mai.flows.artifacts import metric_rows, report_hint, routing_rows
from mai.flows.local_server import serves_mai_alone
from mai.flows.prefect_rest import Artifact, PrefectApiError, RecordedFlowRun, start_flow_run
from mai.flows.summary import build_manifest, catalog_row, describe_models, summary_markdown
from mai.storage.catalog import build_catalog
from mai.storage.paths import Home
from mai.storage.runs import write_manifest
from mai.storage.samples import loader_tag, materialized_shards, shard_directory
from mai.tasks.from_store import shards_answered_by_store
from mai.tasks.prompt_limits import checked_shards
from mai.tasks.routes import score_run

from mai.evals.registry import get_benchmark
from mai.manifest import RunManifest, RunTimings, ShardOutcome
from mai.plan import RunPlan
from mai.progress import Tally


def run_from_store(plan: RunPlan) -> RunManifest | None:
    """The run's manifest when every output of the run is stored and the API is one `mai` serves; None otherwise
    (nothing was written: the caller runs the `mai-run` flow)."""
    url = os.environ.get("PREFECT_API_URL")
    if plan.config.workers or not url or not serves_mai_alone():
        return None
    started, started_at = time.perf_counter(), datetime.now(UTC)
    home = Home.at(plan.home)
    benchmark = get_benchmark(plan.benchmark)
    shard_paths = materialized_shards(home, shard_directory(
        home, benchmark.name, benchmark.version, plan.source.fingerprint, plan.config.shards, plan.config.limit,
        loader_tag(plan.config.max_image_pixels)))
    if not shard_paths:
        return None
    shard_paths = checked_shards(plan, shard_paths)  # as the flow's limit-prompts task: prompts that do not fit
    stored = shards_answered_by_store(plan, shard_paths)
    if len(stored) < len(shard_paths):
        return None
    lookup_s = time.perf_counter() - started
    try:
        record = start_flow_run(url, "mai-run", f"mai-run/{plan.run_name}", plan.tags,
                                {"config": json.loads(plan.config.model_dump_json())})
    except PrefectApiError:
        return None  # the flow reports the API's failure in its own words
    try:
        manifest = _score_and_record(plan, shard_paths, stored, record, started, started_at, lookup_s)
    except BaseException as error:
        record.finish(completed=False, message=f"{type(error).__name__}: {error}")
        raise
    record.finish(completed=True)
    return manifest


def _score_and_record(plan: RunPlan, shard_paths: list[str], stored: dict[str, ShardOutcome],
                      record: RecordedFlowRun, started: float, started_at: datetime, lookup_s: float) -> RunManifest:
    """What the `mai-run` flow does after its shards (flows/run.py), with its logs and artifacts sent to `record`."""
    record.log(logging.INFO, f"run {plan.run_id}: {plan.mode} of {describe_models(plan)} on {plan.benchmark}, "
                             f"stages {' -> '.join(stage.name for stage in plan.stages)}")
    record.log(logging.INFO, f"{len(stored)} of {len(shard_paths)} shard(s) answered from the store: every step's "
                             "outputs are stored (by this or another run), so the run was routed and scored without "
                             "Prefect's flow engine (no shard flow run or task run) and recorded here over the API")
    stage_maps = {shard: stored[shard].stage_maps for shard in shard_paths}
    scored_at = time.perf_counter()
    scores = score_run(plan, shard_paths, stage_maps)
    timings: RunTimings = {"wall_s": time.perf_counter() - started, "engine_generate_s": 0.0, "model_load_s": 0.0,
                           "shards_s": lookup_s, "route_and_score_s": time.perf_counter() - scored_at}
    manifest = build_manifest(plan, stage_maps, scores, timings, started_at, Tally())
    home = Home.at(plan.home)
    write_manifest(home, plan.run_id, manifest,
                   catalog_row(manifest, plan, started_at, datetime.fromisoformat(manifest["finished_at"])))
    build_catalog(home)
    routes, counts = scores["routes"], manifest["counts"]
    record.log(logging.INFO, f"run {plan.run_id} done: MV1 {routes['MV1']} / MV2 {routes['MV2']} / RT {routes['RT']}, "
                             f"{counts['generations_computed']} generations computed, "
                             f"{counts['generations_reused']} reused")
    record.artifacts += _artifacts(manifest)
    return manifest


def _artifacts(manifest: RunManifest) -> list[Artifact]:
    """The artifacts the flow publishes (flows/run.py, flows/artifacts.py), with the same keys."""
    run_id = manifest["run_id"]
    return [Artifact("mai-run-progress", "progress", 100.0, f"shards done of run {run_id}"),
            Artifact("mai-run-summary", "markdown", summary_markdown(manifest), f"run {run_id}"),
            Artifact("mai-run-routing", "table", json.dumps(routing_rows(manifest)), f"routing counts of run {run_id}"),
            Artifact("mai-run-metrics", "table", json.dumps(metric_rows(manifest)), f"metrics of run {run_id}"),
            Artifact("mai-run-report", "markdown", report_hint(run_id), f"report of run {run_id}")]
