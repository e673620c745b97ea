"""Text renderings of results for the terminal: a run manifest's summary and a table of query rows.

Pure formatting over plain values (manifests and rows as the flows and the catalog return them); `mai`'s
commands print these, and anything else that reports a run can too.
"""

from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from mai.dashboards.rounding import fixed

if TYPE_CHECKING:  # annotations only: mai.manifest imports pydantic, which `mai sql` and the tables need not load
    from mai.manifest import BackendReport, RunManifest


# a run's phases in the order they happen (mai/manifest.py RunTimings): the command's start, then the run's wall time
# (plan to routing and scoring), then what follows it before the manifest is written
PHASES = ("startup_s", "plan_s", "materialize_s", "handover_s", "shards_s", "route_and_score_s", "compaction_s",
          "manifest_s")


def render_summary(manifest: RunManifest) -> str:
    counts, timings, routes = manifest["counts"], manifest["timings"], manifest["routes"]
    lines = [f"run {manifest['run_id']} ({manifest['config']['mode']}, {manifest['config']['benchmark']})"]
    lines.append("routing: " + "  ".join(f"{k}={v}" for k, v in routes.items() if v or k in ("MV1", "MV2", "RT")))
    lines += [f"{m['metric']}[{m['subset']}] = {fixed(m['value'], 4)} (n={m['n']})" for m in manifest["metrics"]
              if m["subset"] == "overall"]
    lines.append("output tokens per stage: " + "  ".join(
        f"{name}={int(s['output_tokens'])} ({fixed(s['mean_output_tokens'], 1)}/gen)"
        for name, s in manifest["stages"].items()))
    lines.append(f"generations: {counts['generations_computed']} computed, {counts['generations_reused']} reused "
                 f"(of {counts['generations_needed']})")
    lines.append(f"samples: {counts['valid']} valid, {counts['errors']} with errors")
    lines += [f"  error {e['sample_id']}: {e['error']}" for e in manifest["errors"][:10]]
    lines.append(f"wall time: {fixed(timings['wall_s'], 1)} s (model generate "
                 f"{fixed(timings['engine_generate_s'], 1)} s, "
                 f"model load {fixed(timings['model_load_s'], 1)} s)")
    measured = cast(Mapping[str, float], timings)
    lines.append("phases: " + ", ".join(f"{name.removesuffix('_s').replace('_', ' ')} {fixed(measured[name], 1)} s"
                                        for name in PHASES if name in measured))
    lines += [f"host taken out: {why}" for why in manifest.get("hosts_taken_out", {}).values()]
    return "\n".join(lines + _backend_lines(manifest["backend"]))


def _backend_lines(backend: BackendReport) -> list[str]:
    lines = [f"vLLM {server['model']}: {server['url']} ({server['owner']}), log {server['log_path']}"
             for server in backend["servers"]]
    if backend["servers"] or backend["restarts"]:
        lines.append(f"vLLM server restarts during the run: {backend['restarts']}")
    return lines


def format_rows(columns: list[str], rows: Sequence[tuple[object, ...]], style: str) -> str:
    """`style` is table (aligned, with a row count), csv (lines end with LF, as DuckDB's own CSV) or json (a list of
    objects: a repeated column name gets a suffix, `x`, `x_1`, as DuckDB names them; NaN and infinities are null,
    which JSON has no number for). Control characters are escaped in every style (`\\x1b` in a table or CSV cell, as
    JSON escapes them), so a value from the store never sends the terminal a sequence nor breaks a row over lines."""
    return "".join(format_chunks(columns, rows, style))


# rows per piece of `format_chunks`: a caller with a deadline checks it between pieces
CHUNK_ROWS = 10_000


def format_chunks(columns: list[str], rows: Sequence[tuple[object, ...]], style: str) -> Iterator[str]:
    """`format_rows`' text in pieces of `CHUNK_ROWS` rows (no newline at the end)."""
    pieces = range(0, len(rows), CHUNK_ROWS)
    if style == "json":
        names = unique_names(columns)
        if not rows:
            yield "[]"
            return
        yield "[\n"
        for start in pieces:  # each piece is a list's items, as json.dumps indents them, less its brackets
            items = json.dumps([{n: _json_value(v) for n, v in zip(names, row)} for row in rows[start:start + CHUNK_ROWS]],
                               indent=2, default=str, allow_nan=False)[2:-2]
            yield items if not start else ",\n" + items
        yield "\n]"
        return
    if style == "csv":
        yield _csv_lines([tuple(columns)])
        for start in pieces:
            yield "\n" + _csv_lines(rows[start:start + CHUNK_ROWS])
        return
    cells = [[_cell(v) for v in row] for row in rows]
    heads = [_visible(c) for c in columns]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(heads)]
    yield "\n".join(["  ".join(c.ljust(w) for c, w in zip(heads, widths)), "  ".join("-" * w for w in widths)])
    for start in pieces:
        yield "\n" + "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths))
                                for row in cells[start:start + CHUNK_ROWS])
    yield f"\n({len(rows)} rows)"


def _csv_lines(rows: Sequence[tuple[object, ...]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(
        [[_visible(v) if isinstance(v, str) else v for v in row] for row in rows])
    return buffer.getvalue()[:-1]


def unique_names(columns: list[str]) -> list[str]:
    """`columns` with each repeat renamed `name_1`, `name_2`, ... (skipping names the query already has), so a
    JSON object keeps every column (`SELECT 1 AS x, 2 AS x`)."""
    taken, names = set(columns), []
    for name in columns:
        if name in names:
            suffix = 1
            while f"{name}_{suffix}" in taken:
                suffix += 1
            name = f"{name}_{suffix}"
            taken.add(name)
        names.append(name)
    return names


def _json_value(value: object) -> object:
    """NaN and +-Infinity as None (JSON has no such numbers; Python would write the bare words), inside lists
    and structs too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{fixed(value, 4)}"
    return "NULL" if value is None else _visible(str(value))


# bidirectional overrides and isolates: they reorder what a terminal shows ("Trojan Source")
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(text: str) -> str:
    """`text` with control characters written as escapes (`\\n`, `\\x1b`, `\\u202e`): a value from the store never
    sends the terminal a sequence (ESC and OSC ones set titles, move the cursor, write links) and never breaks a
    row over lines."""
    if text.isprintable():
        return text
    return "".join(repr(char)[1:-1] if unicodedata.category(char) == "Cc" or char in _BIDI_CONTROLS else char
                   for char in text)
