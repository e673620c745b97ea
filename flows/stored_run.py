"""A run with nothing to compute is a store lookup: no Prefect, no server, no model library.

When every step of every shard of a run is stored (a re-run of a configuration), the run is that lookup, routing
and scoring, and the manifest: about a second from process start. Importing Prefect and running one flow through
its engine costs more than that on its own (a flow that does nothing: about 3 s from process start on the 2-core
machine; docs/benchmarks.md, "Startup"), and with no API configured a flow would first start a temporary server.
So such a run imports no Prefect and makes no flow run: its result is the store's (its manifest, runs row and
catalog, as `mai sql` and `mai report` read them), and recording in Prefect can never change its outcome (an API
that is down or dies meanwhile changes nothing). It ends as the flow does (flows/finish.py): the same plan, stage
maps, routing, scores, manifest and catalog (tests/test_stored_run.py compares the two). A run with a single
output missing goes through the `mai-run` flow (flows/run.py), as does every run started from a deployment.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from mai.flows.finish import finish_run
from mai.flows.summary import describe_models
from mai.storage.paths import Home
from mai.storage.samples import loader_tag, materialized_shards, shard_directory
from mai.tasks.from_store import shards_answered_by_store
from mai.tasks.logs import run_logger
from mai.tasks.prompt_limits import checked_shards
from mai.tasks.routes import score_run

from mai.evals.registry import get_benchmark
from mai.manifest import RunManifest
from mai.plan import RunPlan


def run_from_store(plan: RunPlan) -> RunManifest | None:
    """The run's manifest when every output of the run is stored; None otherwise (nothing was written: the caller
    runs the `mai-run` flow)."""
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
    run_logger().info("run %s: %s of %s on %s: every step's outputs are stored (by this or another run), so the run "
                      "is routed and scored from the store without a Prefect flow run", plan.run_id, plan.mode,
                      describe_models(plan), plan.benchmark)
    outcomes = {shard: stored[shard] for shard in shard_paths}
    scores = score_run(plan, shard_paths, {shard: o.stage_maps for shard, o in outcomes.items()})
    return finish_run(plan, outcomes, scores, started, started_at,
                      {"shards_s": lookup_s, "route_and_score_s": time.perf_counter() - started - lookup_s})
