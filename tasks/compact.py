"""`compact-store`: the end of a run compacts the partitions it wrote to, when they hold many batch files."""

from __future__ import annotations

from pathlib import Path

from mai.storage.maintenance import auto_compact
from mai.storage.partitions import Compaction
from mai.storage.paths import Home
from mai.tasks.logs import run_logger
from prefect import task
from prefect.cache_policies import NO_CACHE


@task(name="compact-store", cache_policy=NO_CACHE)
def compact_partitions(home: str, directories: list[str]) -> list[Compaction]:
    """Cheap when nothing is due (file names are counted, no file is read). A compaction never changes what a
    query answers, so a failure is logged and the run stays complete."""
    try:
        reports = auto_compact(Home.at(home), {Path(d) for d in directories})
    except OSError as error:
        run_logger().warning("compaction skipped: %s (run `mai store compact` later)", error)
        return []
    return [r for r in reports if not r.skipped]
