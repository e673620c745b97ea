"""What a command says about a damaged store: the files every listing leaves out (storage/damage.py), and the files a
completed run should have and has lost. Cheap (no footer is parsed, no pyarrow), so every command that reads the
store can name them once at its end, and add the first to a failure it may explain; `mai store verify` checks more
(storage/verify.py)."""

from __future__ import annotations

import os
from pathlib import Path

from mai.storage.damage import Unreadable, split_readable
from mai.storage.partitions import listed_files
from mai.storage.paths import Home
from mai.storage.tables import TABLES

LOST_HINT = "run `mai store verify --repair`, which says what the next run computes again"


def store_damage(home: Home) -> list[Unreadable]:
    """Unreadable files of every table, then the files completed runs have lost."""
    damaged = [damage for table in TABLES for damage in split_readable(listed_files(home, table))[1]]
    return damaged + lost_run_files(home, {d.path for d in damaged})


def lost_run_files(home: Home, damaged: set[Path]) -> list[Unreadable]:
    """A run with a readable runs row lacks its manifest, routes, scores or metrics; a run with a manifest lacks its
    runs row (written last: only a run killed in that instant, or a lost file). Names and stats only (os.scandir:
    a store of 1,000 runs takes milliseconds)."""
    lost = []
    for run in _entries(home.runs):
        row = home.runs / run / "run.parquet"
        present = set(_entries(home.runs / run))
        if row in damaged:
            continue
        if "run.parquet" not in present:
            if "manifest.json" in present:
                lost.append(Unreadable(row, "missing, though the run's manifest is there", LOST_HINT))
            continue
        expected = [] if "manifest.json" in present else [home.runs / run / "manifest.json"]
        expected += [path for path in [home.routes / run / "routes.parquet"] if not path.exists()]
        expected += [home.table_dir(table) / run for table in ("scores", "metrics")
                     if not any(name.endswith(".parquet") for name in _entries(home.table_dir(table) / run))]
        lost += [Unreadable(path, "missing, though its run completed", LOST_HINT) for path in expected]
    return lost


def _entries(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
