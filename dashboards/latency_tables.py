"""Paper tables 1-4 laid out as the paper lays them out: one row per latency profile (a model on a machine), one
column per image resolution (tables 1-2), per resolution and query length (table 3) or per input and output
length (table 4, with the mean decoding speed), from the `latency_profiles` view. A cell is the mean over the
profile's points that share its column; '-' where the profile has no such point (published profiles hold only
TTFT and decoding speed)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from mai.dashboards.charts import Cell, Section, Table
from mai.dashboards.rounding import fixed
from mai.dashboards.rows import LatencyPointRow

Key = tuple[int, ...]


def _pivot(profiles: list[LatencyPointRow], key: Callable[[LatencyPointRow], Key | None],
           value: Callable[[LatencyPointRow], float | None]) -> tuple[list[Key], dict[str, dict[Key, float]]]:
    cells: dict[str, dict[Key, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in profiles:
        k, v = key(p), value(p)
        if k is not None and v is not None:
            cells[_row_name(p)][k].append(float(v))
    columns = sorted({k for row in cells.values() for k in row})
    return columns, {name: {k: sum(v) / len(v) for k, v in row.items()} for name, row in cells.items()}


def _row_name(p: LatencyPointRow) -> str:
    return f"{p['profile_name']} ({p['model']}, {p['hardware']})"


def _table(columns: list[Key], rows: dict[str, dict[Key, float]], header: Callable[[Key], str], caption: str,
           extra: dict[str, float | None] | None = None, extra_name: str = "") -> Table:
    table = Table(["profile (model)", *(header(c) for c in columns)] + ([extra_name] if extra is not None else []),
                  [], caption)
    for name in sorted(rows):
        cells: list[Cell] = [name, *(f"{fixed(rows[name][c], 2)}" if c in rows[name] else None for c in columns)]
        if extra is not None:
            speed = extra.get(name)
            cells.append(f"{fixed(speed, 2)}" if speed is not None else None)
        table.rows.append(cells)
    return table


def _resolution(p: LatencyPointRow) -> Key | None:
    return (p["image_resolution"],) if p["image_resolution"] is not None else None


def add_tables(section: Section, profiles: list[LatencyPointRow], note: str) -> None:
    """Tables 1-4 as subsections of `section`; `note` says how to store the profiles a table lacks."""
    def side(k: Key) -> str:
        return f"{k[0]}² px"

    items: list[tuple[str, str, Callable[[LatencyPointRow], Key | None], Callable[[LatencyPointRow], float | None],
                      Callable[[Key], str]]] = [
        ("table-1", "Table 1 · Vision preprocessing latency (ms) by image resolution", _resolution,
         lambda p: p["preprocess_ms"], side),
        ("table-2", "Table 2 · Vision encoder latency (ms) by image resolution", _resolution,
         lambda p: p["vision_ms"], side),
        ("table-3", "Table 3 · Time to first token (ms) by image resolution and query tokens",
         lambda p: (p["image_resolution"], p["query_tokens"])
         if p["image_resolution"] is not None and p["query_tokens"] is not None else None,
         lambda p: p["ttft_ms"], lambda k: f"{k[0]}² px, {k[1]} query"),
    ]
    for key, title, column, value, header in items:
        part = section.child(key, title)
        columns, rows = _pivot(profiles, column, value)
        if rows:
            table = _table(columns, rows, header, "")
            if key == "table-3":  # the paper's "Total Tokens" row: image and query tokens of each column
                _, totals = _pivot(profiles, column, lambda p: p["input_tokens"])
                table.rows.insert(0, ["total tokens", *(_mean_of(totals, c) for c in columns)])
            part.tables.append(table)
        else:
            part.notes.append(f"No profile holds these timings: {note}")
    part = section.child("table-4", "Table 4 · Decoding time (ms) by input and output tokens, mean tokens / s")
    # the paper's levels: image resolution (0: none recorded), input tokens, output tokens
    columns, rows = _pivot(profiles, lambda p: (p["image_resolution"] or 0, p["input_tokens"], p["output_tokens"])
                           if p["output_tokens"] is not None else None, lambda p: p["decode_ms"])
    speeds: dict[str, list[float]] = defaultdict(list)
    for p in profiles:
        if (speed := p["tokens_per_s"]) is not None:
            speeds[_row_name(p)].append(float(speed))
    mean_speed: dict[str, float | None] = {name: sum(v) / len(v) for name, v in speeds.items()}
    for name in mean_speed:
        rows.setdefault(name, {})
    if rows:
        part.tables.append(_table(columns, rows, lambda k: (f"{k[0]}² px, " if k[0] else "") + f"{k[1]} in, {k[2]} out",
                                  "", mean_speed, "tokens / s"))
    else:
        part.notes.append(f"No profile holds decoding timings: {note}")


def _mean_of(rows: dict[str, dict[Key, float]], column: Key) -> str | None:
    """The mean over the profiles of one column's value (total tokens are the same for every model)."""
    values = [row[column] for row in rows.values() if column in row]
    return f"{fixed(sum(values) / len(values), 0)}" if values else None
