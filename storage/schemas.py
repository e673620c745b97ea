"""Explicit Arrow schemas of every table (never inferred), columns snake_case with units: each translated from
the table's columns (storage/rows.py, derived from its row TypedDict) by `Table.schema` (storage/tables.py), so a
column and its type are decided in one place, and the catalog's views over the same columns need no pyarrow."""

from __future__ import annotations

import pyarrow as pa

from mai.storage.rows import Columns, ColumnType

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    "VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(), "TIMESTAMP WITH TIME ZONE": UTC_TIMESTAMP, "VARCHAR[]": pa.list_(pa.string()),
    "INTEGER[]": pa.list_(pa.int32()), "DOUBLE[]": pa.list_(pa.float64()),
}


def arrow_schema(columns: Columns) -> pa.Schema:
    """The Arrow schema of a table's columns, in their order (every Arrow column is nullable)."""
    return pa.schema([(name, _ARROW_TYPES[type_]) for name, type_ in columns])
