"""Shared reads over the catalog views for the dashboards (compare, policy lab, report): rows as typed mappings
(`mai.dashboards.rows`), a run's label, the generations each run used. Everything here is SELECTs through
`mai.storage.catalog.connect` (read-only, in memory); values from the user (run ids, model names) are always query
parameters."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar, cast

import duckdb

from mai.storage.catalog import connect
from mai.storage.paths import Home
from mai.storage.rows import RunRow
from mai.types import STAGE_NAMES, Role

R = TypeVar("R", bound=Mapping[str, object])
# the name a Full RT run (small R, then RT for every sample) goes by in every report
FULL_RT = "Full RT"

GEN_COLUMNS = ", ".join(f"gen_{stage}" for stage in STAGE_NAMES)
# one row per (run, sample, stage) a run used a generation for; UNPIVOT drops the stages a sample skipped
USED_GENERATIONS = (f"UNPIVOT (SELECT run_id, sample_id, {GEN_COLUMNS} FROM routes) ON {GEN_COLUMNS} "
                    "INTO NAME stage VALUE gen_id")
# the headline metric of a run, as the paper reports it: F1 where the benchmark has it (POPE), else the first
# of the benchmark's own overall metrics (accuracy, relaxed accuracy, ANLS, circular accuracy ...)
HEADLINE = """
    SELECT run_id, scorer_profile, metric, value FROM metrics
    WHERE subset = 'overall' AND metric NOT IN ('unparsed_rate', 'yes_ratio', 'precision', 'recall', 'row_accuracy')
    QUALIFY row_number() OVER (PARTITION BY run_id, scorer_profile ORDER BY metric = 'f1' DESC, metric) = 1
"""


# one connection for a whole report (creating the views globs the store: ~40 ms a connection)
_SESSION: ContextVar[tuple[Path, duckdb.DuckDBPyConnection] | None] = ContextVar("dashboard_session", default=None)


@contextmanager
def session(home: Home) -> Iterator[None]:
    """Every `fetch` on `home` inside shares one read-only connection (nested sessions reuse the outer one)."""
    current = _SESSION.get()
    if current is not None and current[0] == home.root:
        yield
        return
    with connect(home) as connection:
        token = _SESSION.set((home.root, connection))
        try:
            yield
        finally:
            _SESSION.reset(token)


def fetch(home: Home, shape: type[R], sql: str, params: Sequence[object] = ()) -> list[R]:
    """Rows of one SELECT over the views, as `shape` (a TypedDict naming the SELECT's columns: not checked at run
    time, the query and its shape are written side by side)."""
    with session(home):
        current = _SESSION.get()
        assert current is not None
        cursor = current[1].execute(sql, list(params))
        columns = [d[0] for d in cursor.description]
        return cast("list[R]", [dict(zip(columns, row)) for row in cursor.fetchall()])


def read_runs(home: Home) -> list[RunRow]:
    """Every completed run, oldest first."""
    return fetch(home, RunRow, "SELECT * FROM runs ORDER BY started_at, run_id")


def role_model(run: RunRow, role: Role) -> str | None:
    return run["small_model"] if role == "small" else run["large_model"]


def run_label(run: RunRow) -> str:
    """What a run is, in the paper's words: 'MAI', 'MAI +S2', 'MAI sparse L8', 'Full RT', 'large R', ..."""
    if run["mode"] == "cascade":
        label = "MAI" + (" +S2" if run["s2"] else "")
        if run["transfer"] == "sparse":
            label += f" sparse L{run['transfer_layer']}"
            delta = run["transfer_delta"]
            if delta is not None and delta != 0.8:
                label += f" d{delta:g}"
        return label
    if run["mode"] == "full_rt":
        return FULL_RT + (f" sparse L{run['transfer_layer']}" if run["transfer"] == "sparse" else "")
    return f"{run['single_model']} {run['single_prompt']}" + (" +S2" if run["s2"] else "")


def run_models(run: RunRow) -> str:
    """The model(s) a run used: 'small + large' for a pair, the one model of a single-model run."""
    if run["mode"] == "single":
        return str(role_model(run, run["single_model"] or "large"))
    return f"{run['small_model']} + {run['large_model']}"


def default_profile(benchmark: str) -> str:
    """The scorer profile every run writes (a re-scored run also holds others)."""
    from mai.evals.registry import get_benchmark

    return get_benchmark(benchmark).profiles[0]
