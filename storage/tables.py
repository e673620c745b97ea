"""The tables of the store, defined once: where each table's files live, its schema, what identifies a row,
and how its view reads it. Paths (`Home`), compaction, statistics, verification and the catalog's views all
derive from this registry, so a new table is one entry here (plus its row type and columns in rows.py).

Two kinds of table:
- content-addressed (`depth` > 0): rows identified by `key`, shared by every run, appended in batch files
  to partitions `depth` directory levels below the table's directory, and compacted (storage/partitions.py);
- plain (`files`): a glob of immutable files below the table's directory, written whole by one writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal, get_args

from mai.storage.rows import (
    ATTENTION_COLUMNS,
    ESTIMATE_COLUMNS,
    GENERATION_COLUMNS,
    LATENCY_PROFILE_COLUMNS,
    METRIC_COLUMNS,
    ROUTE_COLUMNS,
    RUN_COLUMNS,
    SAMPLE_COLUMNS,
    SCORE_COLUMNS,
    SELECTION_COLUMNS,
    SPECULATIVE_COLUMNS,
    TIMING_COLUMNS,
    Columns,
)

if TYPE_CHECKING:
    import pyarrow as pa

TableName = Literal["samples", "generations", "attention", "selections", "runs", "routes", "metrics",
                    "scores", "estimates", "speculative", "latency_profiles", "timings"]


@dataclass(frozen=True)
class Table:
    name: TableName  # also its directory under `store/` and its view's name
    columns: Columns  # its columns and their types (storage/rows.py)
    # the columns that identify a row (an attention row is one layer of one prefill)
    key: tuple[str, ...] = ()
    # content-addressed: directory levels of a partition below the table's directory
    depth: int = 0
    # plain: a glob of the table's files below its directory
    files: str = ""
    # rows of one run: the view shows them once the run completed (once its `runs` row exists)
    per_run: bool = False
    # a plain table with a key: a key written in several files shows once in the view, the first by this column
    keep_first_by: str = ""
    # columns added later read as NULL in the view even when no file has them yet
    full_schema_view: bool = False

    def __post_init__(self) -> None:
        if (self.depth > 0) == bool(self.files):
            raise ValueError(f"table {self.name}: a table has either partitions (depth) or a files glob")
        if (self.depth or self.keep_first_by) and not self.key:
            raise ValueError(f"table {self.name}: a content-addressed or deduplicated table needs a key")

    @cached_property
    def schema(self) -> pa.Schema:
        """The Arrow schema its files are written with; imported here, where a file is read or written, so that
        the catalog's views (and so `mai sql`) need no pyarrow."""
        from mai.storage.schemas import arrow_schema

        return arrow_schema(self.columns)

    @property
    def content_addressed(self) -> bool:
        return self.depth > 0


# `runs` comes before the tables of one run: their views select the completed runs from it
TABLES: tuple[Table, ...] = (
    Table("samples", SAMPLE_COLUMNS, key=("dataset_fingerprint", "sample_id"),  # a sample of several shard sets
          files="*/*/*.parquet", keep_first_by="shard",  # <benchmark>/<shard set>/shard-NNNNN
          full_schema_view=True),  # split and data_config came later
    Table("generations", GENERATION_COLUMNS, key=("gen_id",), depth=2,  # <model>/<prompt kind>
          full_schema_view=True),
    Table("attention", ATTENTION_COLUMNS, key=("capture_id", "layer"), depth=1,  # <large model>
          full_schema_view=True),  # capture_s came later
    Table("selections", SELECTION_COLUMNS, key=("selection_id",), depth=1),  # <large model>
    Table("runs", RUN_COLUMNS, files="*/run.parquet", full_schema_view=True),  # provenance_json came later
    Table("routes", ROUTE_COLUMNS, files="*/routes.parquet", per_run=True),
    Table("metrics", METRIC_COLUMNS, files="*/*.parquet", per_run=True),  # <run>/<scorer profile>
    Table("scores", SCORE_COLUMNS, files="*/*.parquet", per_run=True),  # <run>/<scorer profile>
    Table("estimates", ESTIMATE_COLUMNS, files="*/*.parquet", per_run=True),  # <run>/<estimate name>
    Table("speculative", SPECULATIVE_COLUMNS, files="*/*.parquet", per_run=True),  # <run>/k<draft tokens>[-batch]
    Table("timings", TIMING_COLUMNS, files="*/*.parquet", per_run=True),  # <timing set>/<run>
    Table("latency_profiles", LATENCY_PROFILE_COLUMNS, files="*.parquet"),  # <profile name>
)

CONTENT_ADDRESSED: tuple[Table, ...] = tuple(t for t in TABLES if t.content_addressed)

_BY_NAME: dict[TableName, Table] = {t.name: t for t in TABLES}
if set(_BY_NAME) != set(get_args(TableName)) or len(_BY_NAME) != len(TABLES):  # each name exactly once
    raise ValueError("storage/tables.py: TableName and TABLES must name the same tables, each once")


def table_named(name: TableName) -> Table:
    return _BY_NAME[name]
