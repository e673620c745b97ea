"""Explicit Arrow schemas of every table (never inferred), columns snake_case with units: each translated from
the table's columns (storage/rows.py, derived from its row TypedDict), so a column and its type are decided in one
place, and the catalog's views over the same columns need no pyarrow."""

from __future__ import annotations

import pyarrow as pa
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
    Columns,
    ColumnType,
)

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    "VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(), "TIMESTAMP WITH TIME ZONE": UTC_TIMESTAMP, "VARCHAR[]": pa.list_(pa.string()),
    "INTEGER[]": pa.list_(pa.int32()), "DOUBLE[]": pa.list_(pa.float64()),
}


def arrow_schema(columns: Columns) -> pa.Schema:
    """The Arrow schema of a table's columns, in their order (every Arrow column is nullable)."""
    return pa.schema([(name, _ARROW_TYPES[type_]) for name, type_ in columns])


SAMPLES = arrow_schema(SAMPLE_COLUMNS)
GENERATIONS = arrow_schema(GENERATION_COLUMNS)
ROUTES = arrow_schema(ROUTE_COLUMNS)
METRICS = arrow_schema(METRIC_COLUMNS)
SCORES = arrow_schema(SCORE_COLUMNS)
ATTENTION = arrow_schema(ATTENTION_COLUMNS)
SELECTIONS = arrow_schema(SELECTION_COLUMNS)
LATENCY_PROFILES = arrow_schema(LATENCY_PROFILE_COLUMNS)
ESTIMATES = arrow_schema(ESTIMATE_COLUMNS)
SPECULATIVE = arrow_schema(SPECULATIVE_COLUMNS)
RUNS = arrow_schema(RUN_COLUMNS)
