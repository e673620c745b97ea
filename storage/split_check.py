"""Runs whose samples are not the split they recorded (`mai store verify`).

Since 2026-11-28 a run's data fingerprint names the split and the hub config as well as the data's content
(mai.evals.loading.data_fingerprint), and each sample row names its split: a run reads its own split by construction.
Before, the fingerprint named the files alone, so the samples materialised for one split of a folder were reused by a
run on another split with the same limit, shards and pixel cap. Those samples' rows carry no split; which split they
are is the split of the first completed run that used that materialisation. A later run that recorded another split
read them: it is flagged, and re-running it (today's loader) evaluates its own split."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from mai.storage.catalog import query
from mai.storage.paths import Home


@dataclass(frozen=True)
class SplitMismatch:
    """A run whose recorded split (and config) is not the one its samples were read from."""

    run_id: str
    split: str
    config: str | None
    samples_split: str
    samples_config: str | None
    samples_from_run_id: str | None  # the run that materialised them (stores from before), None where rows say

    def problem(self) -> str:
        origin = (f" (materialised for run {self.samples_from_run_id}: stored before the split was part of the "
                  "data fingerprint)" if self.samples_from_run_id else "")
        return (f"run {self.run_id} recorded split {self.split!r}{_config(self.config)} but its samples are split "
                f"{self.samples_split!r}{_config(self.samples_config)}{origin}: its results are another split's; "
                "run its configuration again (it now reads its own split) and leave this run out of reports")


def _config(config: str | None) -> str:
    return f" (config {config!r})" if config else ""


@dataclass(frozen=True)
class _RunData:
    run_id: str
    started_at: datetime
    fingerprint: str
    split: str
    config: str | None
    materialisation: tuple[object, ...]  # what named its samples' directory before: data, benchmark, subset, rules


RUNS = """
    SELECT run_id, started_at, dataset_fingerprint, benchmark, config_json, provenance_json FROM runs
    ORDER BY started_at, run_id
"""
# per data fingerprint, the splits its sample rows name; NULL for rows written before they named one
SAMPLE_SPLITS = """
    SELECT dataset_fingerprint, split, data_config FROM samples GROUP BY ALL
"""


def runs_reading_another_split(home: Home) -> list[SplitMismatch]:
    """Every completed run whose samples are another split's (or another config's) than the one it recorded."""
    _, run_rows = query(home, RUNS)
    _, split_rows = query(home, SAMPLE_SPLITS)
    named: dict[str, set[tuple[str, str | None]]] = {}
    unnamed: set[str] = set()
    for fingerprint, split, config in split_rows:
        if split is None:
            unnamed.add(str(fingerprint))
        else:
            named.setdefault(str(fingerprint), set()).add((str(split), None if config is None else str(config)))
    runs = [run for row in run_rows if (run := _run_data(row)) is not None]
    return _mismatched_by_rows(runs, named) + _mismatched_by_first_run(
        [run for run in runs if run.fingerprint in unnamed])


def _run_data(row: tuple[object, ...]) -> _RunData | None:
    run_id, started_at, fingerprint, benchmark, config_json, provenance_json = row
    config = json.loads(str(config_json or "{}"))
    data = json.loads(str(provenance_json or "{}")).get("data") or {}
    split = data.get("split") or config.get("split")
    if split is None:  # a run stored before its provenance, on its benchmark's default split: nothing to compare
        return None
    assert isinstance(started_at, datetime)
    return _RunData(str(run_id), started_at, str(fingerprint), str(split), data.get("config") or config.get("subset"),
                    (fingerprint, benchmark, config.get("limit"), config.get("shards"),
                     config.get("max_image_pixels")))


def _mismatched_by_rows(runs: list[_RunData], named: dict[str, set[tuple[str, str | None]]]) -> list[SplitMismatch]:
    """Runs whose samples' rows name their split: any other split than the run's."""
    return [SplitMismatch(run.run_id, run.split, run.config, split, config, None)
            for run in runs for split, config in sorted(named.get(run.fingerprint, ()), key=str)
            if (split, config) != (run.split, run.config)]


def _mismatched_by_first_run(runs: list[_RunData]) -> list[SplitMismatch]:
    """Runs on samples without a split (stores from before): the first run of each materialisation chose them."""
    first: dict[tuple[object, ...], _RunData] = {}
    found = []
    for run in sorted(runs, key=lambda r: (r.started_at, r.run_id)):
        chose = first.setdefault(run.materialisation, run)
        if (chose.split, chose.config) != (run.split, run.config):
            found.append(SplitMismatch(run.run_id, run.split, run.config, chose.split, chose.config, chose.run_id))
    return found
