"""A terminal progress bar over generation stages (rich), fed by `mai.progress` events."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mai import progress


class ProgressBar:
    def __init__(self) -> None:
        self.bar = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TimeRemainingColumn(), transient=False,
                            console=Console(stderr=True))  # stdout stays clean for --json
        self.tasks: dict[str, TaskID] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        self.bar.start()
        progress.add_listener(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        progress.remove_listener(self)
        self.bar.stop()

    def stage_started(self, stage: str, total: int) -> None:
        """Totals count only what must be generated; reused outputs never appear as work."""
        with self._lock:
            if stage not in self.tasks:
                self.tasks[stage] = self.bar.add_task(stage, total=total)
            else:
                current = self.bar.tasks[self.tasks[stage]].total or 0
                self.bar.update(self.tasks[stage], total=current + total)

    def advanced(self, stage: str, done: int) -> None:
        with self._lock:
            self.bar.advance(self.tasks[stage], done)
