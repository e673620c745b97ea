"""How every run ends, whichever path produced its stage outputs: the `mai-run` flow (flows/run.py) or the store
lookup of a run with nothing to compute (flows/stored_run.py). One function writes the manifest and the runs row
(last: that row in the store means the run completed), rebuilds the catalog, compacts what the run appended, logs
the run's result and, inside a Prefect flow run, publishes its artifacts. It imports no Prefect of its own."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import cast

from mai.flows.summary import build_manifest, catalog_row, run_partitions
from mai.storage.catalog import build_catalog
from mai.storage.maintenance import auto_compact
from mai.storage.paths import Home
from mai.storage.runs import write_manifest
from mai.tasks.logs import run_logger

from mai.manifest import RunManifest, RunScores, RunTimings, ShardOutcome
from mai.plan import RunPlan
from mai.progress import Tally


def finish_run(plan: RunPlan, outcomes: dict[str, ShardOutcome], scores: RunScores, started: float,
               started_at: datetime, phases: dict[str, float],
               hosts_taken_out: dict[str, str] | None = None) -> RunManifest:
    """The run's manifest, written with its runs row and catalog. `outcomes`: every shard's outcome, in shard
    order; `started`: the run's perf_counter at its start; `phases`: seconds per phase (RunTimings' names);
    `hosts_taken_out`: the workers' hosts that could not serve a fanned-out run (host -> why), listed in the
    manifest when there are any."""
    home = Home.at(plan.home)
    tally = Tally()  # what this run's shards made the engines do (never another run's work)
    for outcome in outcomes.values():
        tally.add(outcome.tally)
    manifest_started = time.perf_counter()
    timings = cast(RunTimings, {"wall_s": manifest_started - started, "engine_generate_s": tally.generate_s,
                                "model_load_s": tally.load_s, **phases})
    manifest = build_manifest(plan, {shard: o.stage_maps for shard, o in outcomes.items()}, scores, timings,
                              started_at, tally)
    if hosts_taken_out:
        manifest["hosts_taken_out"] = dict(hosts_taken_out)
    timings["manifest_s"] = time.perf_counter() - manifest_started
    write_manifest(home, plan.run_id, manifest,
                   catalog_row(manifest, plan, started_at, datetime.fromisoformat(manifest["finished_at"])))
    build_catalog(home)
    log = run_logger()
    if appended_outputs(manifest):
        _compact(home, run_partitions(plan, appended=True))
    else:  # no generation, capture or selection file was written: nothing can be due
        log.info("run %s computed nothing: no partition to compact", plan.run_id)
    routes, counts = scores["routes"], manifest["counts"]
    log.info("run %s done: MV1 %d / MV2 %d / RT %d, %d generations computed, %d reused", plan.run_id,
             routes["MV1"], routes["MV2"], routes["RT"], counts["generations_computed"], counts["generations_reused"])
    if in_flow_run():
        from mai.flows.artifacts import publish_run

        publish_run(manifest)
    return manifest


def appended_outputs(manifest: RunManifest) -> bool:
    """Whether the run wrote any output file (a generation, attention capture or token selection) to the store."""
    counts = manifest["counts"]
    return bool(counts["generations_computed"] or counts["attention_rows_computed"] or counts["selections_computed"])


def _compact(home: Home, directories: set[Path]) -> None:
    """Cheap when nothing is due (file names are counted, no file is read). A compaction never changes what a
    query answers, so a failure is logged and the run stays complete."""
    try:
        auto_compact(home, directories)
    except OSError as error:
        run_logger().warning("compaction skipped: %s (run `mai store compact` later)", error)


def in_flow_run() -> bool:
    """Whether this code runs inside a Prefect flow run (never true where Prefect was not imported)."""
    if "prefect" not in sys.modules:
        return False
    from prefect.context import FlowRunContext

    return FlowRunContext.get() is not None
