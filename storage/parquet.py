"""Atomic Parquet writes with explicit schemas. Files are immutable once renamed into place."""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar, cast

import pyarrow as pa
import pyarrow.parquet as pq

from mai.files import atomic_path
from mai.storage.damage import DamagedFileError, Unreadable, parquet_damage
from mai.storage.tables import TableName, table_named


def write_rows(path: Path, rows: Sequence[Mapping[str, object]], table: TableName) -> Path:
    """`rows` of `table` by column name (its row type of rows.py), typed by its schema. Write to a temp name in
    the same directory, fsync, then `os.replace`: a reader (or a run killed mid-write) sees either the whole
    file or none. The temp name does not end in `.parquet`, so no `*.parquet` glob (ours or DuckDB's) ever
    picks up a partial file."""
    return write_table(path, arrow_table(rows, table_named(table).schema))


def write_table(path: Path, table: pa.Table, row_group_size: int | None = None) -> Path:
    """`write_rows` for a table already in memory (compaction), with row groups of `row_group_size` rows
    (None: pyarrow's default)."""
    with atomic_path(path, fsync=True) as temp:
        pq.write_table(table, temp, row_group_size=row_group_size)
    return path


def read_rows(paths: list[Path], columns: list[str] | None = None) -> list[dict[str, object]]:
    """Rows by column name, of any table (a reader of one table reads them as its row type of rows.py). Read
    with the Parquet reader alone, as `read_columns` (`pq.read_table` goes through pyarrow.dataset: pandas)."""
    rows: list[dict[str, object]] = []
    for path in paths:
        with reading(path) as parquet:
            rows.extend(parquet.read(columns=columns).to_pylist())
    return rows


@contextmanager
def reading(path: Path) -> Iterator[pq.ParquetFile]:
    """The file opened with the Parquet reader; a missing or damaged file (or one pyarrow fails on while it is read
    inside the block) is a DamagedFileError naming it (storage/damage.py), not a traceback."""
    reason = parquet_damage(path)
    if reason is not None:
        raise DamagedFileError(Unreadable(path, reason))
    try:
        yield pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:  # a footer damaged inside
        raise DamagedFileError(Unreadable(path, f"{type(error).__name__}: {' '.join(str(error).split())}")) from error


def read_columns(paths: Sequence[Path], columns: list[str], key: str | None = None,
                 wanted: Sequence[str] | None = None) -> pa.Table:
    """The `columns` of the files as one table (a column a file lacks, as an older schema, is null there), with
    only the rows whose `key` is in `wanted` when both are given. Read file by file with the Parquet reader alone:
    `pyarrow.dataset` imports pandas, a third of a cached run's start-up (docs/benchmarks.md, "Startup")."""
    import pyarrow.compute as pc  # here: the catalog (and so `mai sql`) imports this module, not compute

    tables = []
    for path in paths:
        with reading(path) as parquet:
            present = set(parquet.schema_arrow.names)
            table = parquet.read(columns=[c for c in columns if c in present])
        if key is not None and wanted is not None:
            table = table.filter(pc.is_in(table[key].cast(pa.string()), value_set=arrow_array(wanted, pa.string())))
        tables.append(table)
    if not tables:
        return pa.Table.from_arrays([arrow_array([], pa.string()) for _ in columns], names=columns)
    return pa.concat_tables(tables, promote_options="default")


# Python values to Arrow, built from the arrays' buffers: `pa.array` (and so `pa.Table.from_pylist`) first asks
# pandas whether its input is one of pandas' types, importing it: about 0.2 s of CPU, a sixth of a cached re-run's,
# which writes its routes and runs rows and looks ids up in the store but needs nothing else of pandas
# (docs/benchmarks.md, "Startup"). The store's schemas (storage/schemas.py) use only the types below.
_NUMBERS = {pa.int32(): "i", pa.int64(): "q", pa.float64(): "d"}  # array.array type codes of the same width
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_T = TypeVar("_T")


def arrow_table(rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> pa.Table:
    """`pa.Table.from_pylist(rows, schema=schema)` without pandas: a column a row lacks is null there."""
    return pa.Table.from_arrays([arrow_array([row.get(f.name) for row in rows], f.type) for f in schema],
                                schema=schema)


def arrow_array(values: Sequence[object], type_: pa.DataType) -> pa.Array:
    """`pa.array(values, type_)` without pandas, for the store's types: strings, int32, int64, float64, booleans,
    UTC timestamps in microseconds (a naive datetime is taken as UTC, as pyarrow does) and lists of these. None is
    null; a value of another type raises TypeError."""
    present = [value is not None for value in values]
    validity = None if all(present) else _bitmap(present)
    if pa.types.is_string(type_):
        encoded = [_typed(value, str, "a string").encode() if value is not None else b"" for value in values]
        offsets = array.array("i", itertools.accumulate(map(len, encoded), initial=0))
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(type_, len(values), buffers)
    if pa.types.is_list(type_):
        lists = [value if isinstance(value, tuple) else _typed(value, list, "a list") if value is not None else []
                 for value in values]
        offsets = array.array("i", itertools.accumulate(map(len, lists), initial=0))
        children = [arrow_array([item for items in lists for item in items], type_.value_type)]
        return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(offsets)], children=children)
    if pa.types.is_boolean(type_):
        bits = [_typed(value, bool, "a boolean") if value is not None else False for value in values]
        return pa.Array.from_buffers(type_, len(values), [validity, _bitmap(bits)])
    if type_ == pa.timestamp("us", tz="UTC"):
        micros = [_micros(value) if value is not None else 0 for value in values]
        return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(array.array("q", micros))])
    if type_ in _NUMBERS:
        # array.array refuses what is not a number of its type (a string, a float for an int, an int out of range)
        numbers = array.array(_NUMBERS[type_], cast("list[float]", [v if v is not None else 0 for v in values]))
        return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(numbers)])
    raise TypeError(f"no conversion to Arrow {type_} (the store's schemas use none)")


def _bitmap(bits: Sequence[bool]) -> pa.Buffer:
    """Arrow's bit-packed layout: bit i of the buffer (least significant first) is `bits[i]`."""
    packed = bytearray((len(bits) + 7) // 8)
    for index, bit in enumerate(bits):
        if bit:
            packed[index >> 3] |= 1 << (index & 7)
    return pa.py_buffer(packed)


def _typed(value: object, kind: type[_T], what: str) -> _T:
    if not isinstance(value, kind):
        raise TypeError(f"expected {what}, got {type(value).__name__}: {value!r}")
    return value


def _micros(value: object) -> int:
    moment = _typed(value, datetime, "a datetime")
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)
