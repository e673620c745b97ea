"""Attention captures and token selections for sparse RT: immutable Parquet parts per large model.
A capture row is (prefill, layer); a selection row is (prefill, layer, delta). Both are content-addressed,
so a layer or delta sweep stores each prefill and each selection once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from mai.storage.partitions import Partition, table_files, write_part
from mai.storage.paths import Home
from mai.storage.rows import CaptureRow, SelectionRow
from mai.storage.tables import TableName, table_named
from mai.types import ModelSpec


def _read(home: Home, directory: Path, column: str, keys: Iterable[str], columns: list[str] | None = None
          ) -> pa.Table | None:
    """The rows of the partition at `directory` whose `column` is one of `keys` (None: none can match)."""
    wanted = list(dict.fromkeys(keys))
    files = Partition(home, directory).files()
    if not wanted or not files:
        return None
    return ds.dataset([str(p) for p in files], format="parquet").to_table(
        columns=columns, filter=pc.field(column).isin(wanted))


def attention_dir(home: Home, model: ModelSpec) -> Path:
    return home.table_dir("attention") / model.slug


def selections_dir(home: Home, model: ModelSpec) -> Path:
    return home.table_dir("selections") / model.slug


def captured_layers(home: Home, model: ModelSpec, capture_ids: Iterable[str]) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    table = _read(home, attention_dir(home, model), "capture_id", capture_ids, ["capture_id", "layer"])
    if table is None:
        return found
    captures: list[str] = table.column("capture_id").to_pylist()
    layers: list[int] = table.column("layer").to_pylist()
    for capture, layer in zip(captures, layers, strict=True):
        found.setdefault(capture, set()).add(layer)
    return found


def read_captures(home: Home, model: ModelSpec, capture_ids: Iterable[str]
                  ) -> dict[tuple[str, int], CaptureRow]:
    table = _read(home, attention_dir(home, model), "capture_id", capture_ids)
    rows: list[CaptureRow] = table.to_pylist() if table is not None else []  # the attention table's columns
    return {(r["capture_id"], r["layer"]): r for r in rows}


def write_captures(home: Home, model: ModelSpec, rows: Sequence[CaptureRow]) -> Path:
    now = datetime.now(UTC)
    return write_part(home, attention_dir(home, model), [{**r, "created_at": now} for r in rows], "attention")


def read_selections(home: Home, model: ModelSpec, selection_ids: Iterable[str]) -> dict[str, SelectionRow]:
    table = _read(home, selections_dir(home, model), "selection_id", selection_ids)
    rows: list[SelectionRow] = table.to_pylist() if table is not None else []  # the selections table's columns
    return {r["selection_id"]: r for r in rows}


def write_selections(home: Home, model: ModelSpec, rows: Sequence[SelectionRow]) -> Path:
    now = datetime.now(UTC)
    return write_part(home, selections_dir(home, model), [{**r, "created_at": now} for r in rows], "selections")


def _rows_of_run(home: Home, name: TableName, run_id: str) -> int:
    files = table_files(home, table_named(name))
    if not files:
        return 0
    dataset = ds.dataset([str(p) for p in files], format="parquet")
    return int(dataset.count_rows(filter=pc.field("run_id") == run_id))


def computed_by_run(home: Home, run_id: str) -> dict[str, int]:
    """Attention rows (prefill x layer) and selections this run computed, over every large model."""
    return {"attention_rows_computed": _rows_of_run(home, "attention", run_id),
            "selections_computed": _rows_of_run(home, "selections", run_id)}
