"""Run progress as a Prefect progress artifact (visible in the UI while the run goes on)."""

from __future__ import annotations

import threading
import time
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from mai.run.prefect_sync import synchronous


class PrefectProgress:
    """Progress = (finished stage groups + share done of the current one) / number of groups.
    Updates are throttled: each one is an API call."""

    def __init__(self, run_id: str, n_groups: int, min_interval_s: float = 2.0, key: str = "mai-run-progress") -> None:
        self.n_groups = max(1, n_groups)
        self.min_interval_s = min_interval_s
        self.group = 0
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self._last = 0.0
        self._lock = threading.Lock()
        self.artifact_id: UUID = synchronous(create_progress_artifact(
            progress=0.0, key=key, description=f"generation progress of run {run_id}"
        ))

    def group_started(self, index: int) -> None:
        with self._lock:
            self.group, self.totals, self.done = index, {}, {}
        self._publish(force=True)

    def stage_started(self, stage: str, total: int) -> None:
        with self._lock:
            self.totals[stage] = self.totals.get(stage, 0) + total

    def advanced(self, stage: str, done: int) -> None:
        with self._lock:
            self.done[stage] = self.done.get(stage, 0) + done
        self._publish()

    def finished(self) -> None:
        with self._lock:
            self.group, self.totals, self.done = self.n_groups, {}, {}
        self._publish(force=True)

    def _publish(self, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < self.min_interval_s:
                return
            self._last = now
            total = sum(self.totals.values())
            share = sum(self.done.values()) / total if total else 0.0
            value = min(100.0, 100.0 * (self.group + share) / self.n_groups)
        update_progress_artifact(self.artifact_id, value)
