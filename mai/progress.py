"""Progress and per-run accounting, without a dependency on who listens (a CLI progress bar, a Prefect artifact).

Several runs may share one process (a worker, a notebook): every event names its run, a listener registered for
a run hears only that run's events, and the work a run did is counted in its own ledger, never as a difference
of process-wide engine counters.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Protocol


class ProgressListener(Protocol):
    def stage_started(self, stage: str, total: int) -> None: ...
    def advanced(self, stage: str, done: int) -> None: ...


_LISTENERS: list[tuple[ProgressListener, str | None]] = []
_LOCK = threading.Lock()


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

    def add(self, other: Tally) -> None:
        self.generations += other.generations
        self.generate_s += other.generate_s
        self.captures += other.captures
        self.load_s += other.load_s

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> Tally:
        return cls(int(values.get("generations", 0)), float(values.get("generate_s", 0.0)),
                   int(values.get("captures", 0)), float(values.get("load_s", 0.0)))

    def as_dict(self) -> dict[str, float]:
        return {key: float(value) for key, value in asdict(self).items()}


_TALLIES: dict[str, Tally] = {}


def count(key: str, generations: int = 0, generate_s: float = 0.0, captures: int = 0, load_s: float = 0.0) -> None:
    """Adds work to the ledger `key` (a run's shard: tasks of other runs never touch it)."""
    with _LOCK:
        tally = _TALLIES.setdefault(key, Tally())
        tally.add(Tally(generations, generate_s, captures, load_s))


def take_tally(key: str) -> Tally:
    """The ledger's totals, removed from the process (a shard reports them once)."""
    with _LOCK:
        return _TALLIES.pop(key, Tally())
