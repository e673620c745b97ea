"""How every run ends, whichever executor computed its stage outputs (mai/pipeline.py): one function writes the
manifest and the runs row (last: that row in the store means the run completed), rebuilds the catalog, compacts
what the run appended, logs the run's result to the logger it is given and hands the manifest to the publisher it
is given (the `mai-run` flow's publishes Prefect artifacts). It imports no Prefect."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import cast

from mai.manifest import RunManifest, RunScores, RunTimings
from mai.pipeline import Log, Phases, ShardsDone
from mai.plan import RunPlan
from mai.progress import Tally
from mai.run.summary import build_manifest, catalog_row, run_partitions
from mai.storage.catalog import build_catalog
from mai.storage.maintenance import auto_compact
from mai.storage.paths import Home
from mai.storage.runs import write_manifest

Publish = Callable[[RunManifest], None]


def finish_run(plan: RunPlan, done: ShardsDone, scores: RunScores, phases: Phases, log: Log,
               publish: Publish | None = None) -> RunManifest:
    """The run's manifest, written with its runs row and catalog. `done`: every shard's outcome, in shard order,
    and the workers' hosts that could not serve a fanned-out run (host -> why), listed in the manifest when there
    are any; `phases`: the run's clock (its start, seconds per phase: RunTimings' names)."""
    home = Home.at(plan.home)
    tally = Tally()  # what this run's shards made the engines do (never another run's work)
    for outcome in done.outcomes.values():
        tally.add(outcome.tally)
    manifest_started = time.perf_counter()
    timings = cast(RunTimings, {"wall_s": manifest_started - phases.started, "engine_generate_s": tally.generate_s,
                                "model_load_s": tally.load_s, **phases.seconds})
    manifest = build_manifest(plan, {shard: o.stage_maps for shard, o in done.outcomes.items()}, scores, timings,
                              phases.started_at, tally)
    if done.hosts_taken_out:
        manifest["hosts_taken_out"] = dict(done.hosts_taken_out)
    # compacted before the manifest, so its seconds are the run's (the outputs are stored whether or not the run
    # completes; a compaction never changes what a query answers)
    compaction_started = time.perf_counter()
    if appended_outputs(manifest):
        _compact(home, run_partitions(plan, appended=True), log)
    else:  # no generation, capture or selection file was written: nothing can be due
        log.info("run %s computed nothing: no partition to compact", plan.run_id)
    timings["compaction_s"] = time.perf_counter() - compaction_started
    timings["manifest_s"] = compaction_started - manifest_started
    write_manifest(home, plan.run_id, manifest,
                   catalog_row(manifest, plan, phases.started_at, datetime.fromisoformat(manifest["finished_at"])))
    catalog_started = time.perf_counter()
    build_catalog(home)  # after the runs row, which its views list: the one phase a manifest cannot hold
    log.info("run %s: catalog rebuilt in %.2f s", plan.run_id, time.perf_counter() - catalog_started)
    routes, counts = scores["routes"], manifest["counts"]
    log.info("run %s done: MV1 %d / MV2 %d / RT %d, %d generations computed, %d reused", plan.run_id,
             routes["MV1"], routes["MV2"], routes["RT"], counts["generations_computed"], counts["generations_reused"])
    if publish is not None:
        publish(manifest)
    return manifest


def appended_outputs(manifest: RunManifest) -> bool:
    """Whether the run wrote any output file (a generation, attention capture or token selection) to the store."""
    counts = manifest["counts"]
    return bool(counts["generations_computed"] or counts["attention_rows_computed"] or counts["selections_computed"])


def _compact(home: Home, directories: set[Path], log: Log) -> None:
    """Cheap when nothing is due (file names are counted, no file is read). A compaction never changes what a
    query answers, so a failure is logged and the run stays complete."""
    try:
        auto_compact(home, directories)
    except OSError as error:
        log.warning("compaction skipped: %s (run `mai store compact` later)", error)

