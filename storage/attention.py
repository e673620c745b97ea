"""Attention captures and token selections for sparse RT: immutable Parquet parts per large model.
A capture row is (prefill, layer); a selection row is (prefill, layer, delta). Both are content-addressed,
so a layer or delta sweep stores each prefill and each selection once."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
from mai.storage.partitions import TABLES, published_files, table_files, write_part
from mai.storage.paths import Home
from mai.storage.schemas import ATTENTION, SELECTIONS

from mai.types import ModelSpec


def _read(home: Home, directory: Path, column: str, keys: Iterable[str], columns: list[str] | None = None
          ) -> list[dict[str, Any]]:
    wanted = list(dict.fromkeys(keys))
    files = published_files(home, directory)
    if not wanted or not files:
        return []
    table = ds.dataset([str(p) for p in files], format="parquet").to_table(
        columns=columns, filter=pc.field(column).isin(wanted))
    rows: list[dict[str, Any]] = table.to_pylist()  # pyarrow is untyped: name the type it returns
    return rows


def attention_dir(home: Home, model: ModelSpec) -> Path:
    return home.attention / model.slug


def selections_dir(home: Home, model: ModelSpec) -> Path:
    return home.selections / model.slug


def captured_layers(home: Home, model: ModelSpec, capture_ids: Iterable[str]) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for row in _read(home, attention_dir(home, model), "capture_id", capture_ids, ["capture_id", "layer"]):
        found.setdefault(row["capture_id"], set()).add(row["layer"])
    return found


def read_captures(home: Home, model: ModelSpec, capture_ids: Iterable[str]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["capture_id"], r["layer"]): r for r in _read(home, attention_dir(home, model), "capture_id", capture_ids)}


def write_captures(home: Home, model: ModelSpec, rows: list[dict[str, Any]]) -> Path:
    now = datetime.now(UTC)
    return write_part(home, attention_dir(home, model), [{**r, "created_at": now} for r in rows], ATTENTION)


def read_selections(home: Home, model: ModelSpec, selection_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    rows = _read(home, selections_dir(home, model), "selection_id", selection_ids)
    return {r["selection_id"]: r for r in rows}


def write_selections(home: Home, model: ModelSpec, rows: list[dict[str, Any]]) -> Path:
    now = datetime.now(UTC)
    return write_part(home, selections_dir(home, model), [{**r, "created_at": now} for r in rows], SELECTIONS)


def computed_by_run(home: Home, run_id: str) -> dict[str, int]:
    """Attention rows (prefill x layer) and selections this run computed, over every large model."""
    counts = {}
    for name, table in (("attention_rows_computed", TABLES[1]), ("selections_computed", TABLES[2])):
        files = table_files(home, table)
        counts[name] = (int(ds.dataset([str(p) for p in files], format="parquet").count_rows(
            filter=pc.field("run_id") == run_id)) if files else 0)
    return counts
