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


class _Board:
    """The process's listeners and per-shard ledgers, behind one lock (engines report from their threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listeners: list[tuple[ProgressListener, str | None]] = []
        self.tallies: dict[str, Tally] = {}


_BOARD = _Board()


def add_listener(listener: ProgressListener, run_id: str | None = None) -> None:
    """`run_id` None: hear every run of this process (a terminal that runs one configuration)."""
    with _BOARD.lock:
        _BOARD.listeners.append((listener, run_id))


def remove_listener(listener: ProgressListener) -> None:
    with _BOARD.lock:
        _BOARD.listeners[:] = [(other, run) for other, run in _BOARD.listeners if other is not listener]


def _listeners(run_id: str | None) -> list[ProgressListener]:
    with _BOARD.lock:
        return [listener for listener, run in _BOARD.listeners if run is None or run == run_id]


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
        self.generations += other.generations
        self.generate_s += other.generate_s
        self.captures += other.captures
        self.load_s += other.load_s
        self.capture_s += other.capture_s


def count(key: str, generations: int = 0, generate_s: float = 0.0, captures: int = 0, load_s: float = 0.0,
          capture_s: float = 0.0) -> None:
    """Adds work to the ledger `key` (a run's shard: tasks of other runs never touch it)."""
    with _BOARD.lock:
        tally = _BOARD.tallies.setdefault(key, Tally())
        tally.add(Tally(generations, generate_s, captures, load_s, capture_s))


def take_tally(key: str) -> Tally:
    """The ledger's totals, removed from the process (a shard reports them once)."""
    with _BOARD.lock:
        return _BOARD.tallies.pop(key, Tally())
