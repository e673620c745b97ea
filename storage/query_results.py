"""Taking a query's final result out of DuckDB for printing (`mai sql`): bounded, and with times as DuckDB prints them.

- **Bounded.** A result is Python objects (about 60 bytes a value) and then printed text, so a result of millions of
  values takes minutes and gigabytes after the query itself has finished (`SELECT range FROM range(3000000)` as JSON
  took 110 s and 1.97 GB). `ResultRules` refuses a result past `max_values` values (rows x columns, each element of
  a list or struct counted) or `max_text` characters of text while it is fetched, chunk by chunk, so that neither
  the worker nor the caller ever holds more; `mai sql` uses `FOR_PRINTING`.
- **Times as DuckDB prints them.** DuckDB's Python values cannot say `infinity`: an infinite TIMESTAMP becomes
  9999-12-31 23:59:59.999999 (a real value too) and -infinity 0001-01-01. With `printed_times` a DATE or TIMESTAMP
  column of the result is cast to text in DuckDB (`infinity`, `2026-11-28 09:00:00+00`), which prints them all as
  DuckDB itself does. Times inside lists and structs stay Python values.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from mai.errors import ConfigError

Rows = tuple[list[str], list[tuple[object, ...]]]

# what `mai sql` prints at most (docs/store-and-sql.md, "Limits"): formatted, about 20 s of CPU on the slowest
# machine measured and a few hundred MB
MAX_RESULT_VALUES = 1_000_000
MAX_RESULT_TEXT = 64_000_000  # characters
FETCH_ROWS = 10_000


@dataclass(frozen=True)
class ResultRules:
    """How a query's final result is taken: at most `max_values` values and `max_text` characters of text (None:
    unbounded), and with DATE and TIMESTAMP columns as DuckDB prints them when `printed_times`."""

    max_values: int | None = None
    max_text: int | None = None
    printed_times: bool = False


UNBOUNDED = ResultRules()
FOR_PRINTING = ResultRules(MAX_RESULT_VALUES, MAX_RESULT_TEXT, printed_times=True)


def final_rows(connection: duckdb.DuckDBPyConnection, statement: duckdb.Statement, rules: ResultRules) -> Rows:
    """(columns, rows) of `statement` (a SELECT) under `rules`; a ConfigError when the result is past its bounds."""
    cursor = connection.execute(_printed(connection, statement.query) if rules.printed_times else statement)
    columns = [d[0] for d in cursor.description] if cursor.description else []
    if rules.max_values is None and rules.max_text is None:
        return columns, cursor.fetchall()
    rows: list[tuple[object, ...]] = []
    tally = _Tally()
    while chunk := cursor.fetchmany(FETCH_ROWS):
        for row in chunk:
            tally.add(row)
        _check(tally, rules)
        rows.extend(chunk)
    return columns, rows


def _printed(connection: duckdb.DuckDBPyConnection, query: str) -> str:
    """`query` with each DATE or TIMESTAMP column cast to DuckDB's text of it, the columns' names and order kept (by
    position: a result may repeat a name). The query as it is when it has none (binding it costs milliseconds)."""
    relation = connection.sql(query)
    types = [str(t) for t in relation.types]
    if not any(_is_time(t) for t in types):
        return query
    columns = [f"CAST(#{i} AS VARCHAR) AS {_quoted(name)}" if _is_time(t) else f"#{i} AS {_quoted(name)}"
               for i, (name, t) in enumerate(zip(relation.columns, types), start=1)]
    return f"SELECT {', '.join(columns)} FROM (\n{_statement_text(query)}\n)"  # a last comment ends at its line


def _statement_text(query: str) -> str:
    """A statement's text as DuckDB extracted it, less the semicolons that end it (and any comment after them)."""
    end = len(query)
    for position, kind in reversed(duckdb.tokenize(query)):
        if kind == duckdb.token_type.comment:
            continue
        if kind != duckdb.token_type.operator or query[position] != ";":
            break
        end = position
    return query[:end]


def _is_time(type_name: str) -> bool:
    """A top-level DATE or TIMESTAMP of any precision or zone (not a list or struct of them)."""
    return type_name == "DATE" or (type_name.startswith("TIMESTAMP") and "[" not in type_name)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Tally:
    """Values and characters of text fetched so far (each element of a list, struct or map a value)."""

    def __init__(self) -> None:
        self.values = 0
        self.text = 0

    def add(self, value: object) -> None:
        if isinstance(value, (tuple, list)):
            for item in value:
                self.add(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                self.add(key)
                self.add(item)
        else:
            self.values += 1
            if isinstance(value, (str, bytes)):
                self.text += len(value)


def _check(tally: _Tally, rules: ResultRules) -> None:
    over = ((rules.max_values is not None and tally.values > rules.max_values and
             f"more than {rules.max_values:,} values (rows x columns)") or
            (rules.max_text is not None and tally.text > rules.max_text and
             f"more than {rules.max_text:,} characters of text"))
    if over:
        raise ConfigError(f"the result holds {over}, more than `mai sql` prints: narrow it (WHERE, LIMIT, fewer "
                          "columns) or aggregate it, or query the catalog file with DuckDB itself (`mai catalog` "
                          "prints its path)")
