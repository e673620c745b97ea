"""Progress and per-run accounting, without a dependency on who listens (a CLI progress bar, a Prefect artifact).

Several runs may share one process (a worker, a notebook): every event names its run, a listener registered for
a run hears only that run's events, and the work a run did is counted in its own ledger, never as a difference
of process-wide engine counters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol


class ProgressListener(Protocol):
    def stage_started(self, stage: str, total: int) -> None: ...
    def advanced(self, stage: str, done: int) -> None: ...


# the process's listeners and per-shard ledgers, behind one lock (engines report from their threads)
_LOCK = threading.Lock()
_LISTENERS: list[tuple[ProgressListener, str | None]] = []
_TALLIES: dict[str, Tally] = {}


def add_listener(listener: ProgressListener, run_id: str | None = None) -> None:
    """`run_id` None: hear every run of this process (a terminal that runs one configuration)."""
    with _LOCK:
        _LISTENERS.append((listener, run_id))


def remove_listener(listener: ProgressListener) -> None:
    with _LOCK:
        _LISTENERS[:] = [(other, run) for other, run in _LISTENERS if other is not listener]


def _listeners(run_id: str | None) -> list[ProgressListener]:
    with _LOCK:
        return [listener for listener, run in _LISTENERS if run is None or run == run_id]


def stage_started(stage: str, total: int, run_id: str | None = None) -> None:
    for listener in _listeners(run_id):
        listener.stage_started(stage, total)


def advanced(stage: str, done: int, run_id: str | None = None) -> None:
    for listener in _listeners(run_id):
        listener.advanced(stage, done)


@dataclass
class Tally:
    """What one run (or one shard of it) made its engines do."""

    generations: int = 0
    generate_s: float = 0.0
    captures: int = 0
    load_s: float = 0.0
    capture_s: float = 0.0  # sparse RT's attention-capture prefills (not generations: not in generate_s)

    def add(self, other: Tally) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def count(key: str, generations: int = 0, generate_s: float = 0.0, captures: int = 0, load_s: float = 0.0,
          capture_s: float = 0.0) -> None:
    """Adds work to the ledger `key` (a run's shard: tasks of other runs never touch it)."""
    with _LOCK:
        _TALLIES.setdefault(key, Tally()).add(Tally(generations, generate_s, captures, load_s, capture_s))


def take_tally(key: str) -> Tally:
    """The ledger's totals, removed from the process (a shard reports them once)."""
    with _LOCK:
        return _TALLIES.pop(key, Tally())
