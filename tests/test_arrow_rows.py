"""The store builds its Arrow columns from buffers (storage/parquet.py, `arrow_array`): `pa.array` would import
pandas, about 0.2 s of CPU, a sixth of a cached re-run's. Every column of every table's schema (storage/tables.py) must
come out as `pa.Table.from_pylist` builds it (nulls, NaN, naive and offset datetimes, bit positions past a byte
included), and a value of the wrong type must still be refused."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from mai.storage import schemas
from mai.storage.parquet import arrow_array, arrow_table
from mai.storage.tables import TABLES

# per type, values that exercise its layout: nulls (validity bitmap), more than 8 values (a second bitmap byte)
VALUES: dict[pa.DataType, list[object]] = {
    pa.string(): ["a", "", "é☃ \x00", None, "x" * 300],
    pa.int32(): [0, -5, 2**31 - 1, -(2**31), None],
    pa.int64(): [0, -(2**63), 2**40, None],
    pa.float64(): [0.0, -1.5, float("nan"), None, 3, float("inf"), 1e-310],
    pa.bool_(): [True, False, None, True, True, False, False, False, True, None],
    schemas.UTC_TIMESTAMP: [datetime(2026, 11, 26, 15, 56, 32, 123456, tzinfo=UTC), datetime(2020, 1, 1, 3, 4, 5, 6),
                            datetime(1960, 5, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))), None],
    pa.list_(pa.string()): [["a", None, "b"], [], None, ["é"], ("t", "u")],
    pa.list_(pa.float64()): [[1.0, None], [], None, [float("nan")]],
    pa.list_(pa.int32()): [[1, 2, None], [], None, [7]],
}
SCHEMAS = {table.name: table.schema for table in TABLES}


@pytest.mark.parametrize("type_", list(VALUES), ids=str)
def test_a_column_is_what_pyarrow_builds(type_: pa.DataType) -> None:
    ours = arrow_array(VALUES[type_], type_)
    ours.validate(full=True)
    assert ours.type == type_ and ours.null_count == pa.array(VALUES[type_], type_).null_count
    assert repr(ours.to_pylist()) == repr(pa.array(VALUES[type_], type_).to_pylist())  # repr: NaN equals NaN


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_schemas_rows_are_what_from_pylist_builds(name: str) -> None:
    schema = SCHEMAS[name]
    rows: list[dict[str, object]] = [
        {f.name: VALUES[f.type][(n + i) % len(VALUES[f.type])] for i, f in enumerate(schema)} for n in range(11)]
    rows.append({})  # a row without a column is null there
    ours = arrow_table(rows, schema)
    ours.validate(full=True)
    expected = pa.Table.from_pylist(rows, schema=schema)
    assert ours.schema == expected.schema and repr(ours.to_pylist()) == repr(expected.to_pylist())


@pytest.mark.parametrize(("value", "type_"), [(1, pa.string()), ("1", pa.int32()), (1.5, pa.int64()),
                                              (1, pa.bool_()), ("a", pa.list_(pa.string())),
                                              ("2026-11-26", schemas.UTC_TIMESTAMP), ("1.0", pa.float64())])
def test_a_value_of_another_type_is_refused(value: object, type_: pa.DataType) -> None:
    with pytest.raises(TypeError):
        arrow_array([value], type_)


def test_an_int_out_of_range_is_refused() -> None:
    with pytest.raises(OverflowError):
        arrow_array([2**31], pa.int32())


def test_writing_rows_imports_no_pandas() -> None:
    probe = ("import sys; from mai.storage.parquet import arrow_table; from mai.storage.tables import table_named; "
             "arrow_table([{'run_id': 'r', 'score': 1.0, 'parsed': True}], table_named('routes').schema); "
             "print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False", done.stderr
