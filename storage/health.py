"""What a command says about a damaged store: the files every listing leaves out (storage/damage.py), and the files a
completed run should have and has lost. Cheap (no footer is parsed, no pyarrow), so every command that reads the
store can name them once at its end, and add the first to a failure it may explain; `mai store verify` checks more
(storage/verify.py)."""

from __future__ import annotations

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
    runs row (written last: only a run killed in that instant, or a lost file)."""
    lost = []
    for run in sorted(home.runs.glob("*/")) if home.runs.is_dir() else []:
        row = run / "run.parquet"
        if row in damaged:
            continue
        if not row.exists():
            if (run / "manifest.json").exists():
                lost.append(Unreadable(row, "missing, though the run's manifest is there", LOST_HINT))
            continue
        expected = [run / "manifest.json", home.routes / run.name / "routes.parquet"]
        lost += [Unreadable(path, "missing, though its run completed", LOST_HINT) for path in expected if not path.exists()]
        lost += [Unreadable(home.table_dir(table) / run.name, "missing, though its run completed", LOST_HINT)
                 for table in ("scores", "metrics") if not any(home.table_dir(table).glob(f"{run.name}/*.parquet"))]
    return lost
