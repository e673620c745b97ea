"""Text renderings of results for the terminal: a run manifest's summary and a table of query rows.

Pure formatting over plain values (manifests and rows as the flows and the catalog return them); `mai`'s
commands print these, and anything else that reports a run can too.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: mai.manifest imports pydantic, which `mai sql` and the tables need not load
    from mai.manifest import BackendReport, RunManifest


def render_summary(manifest: RunManifest) -> str:
    counts, timings, routes = manifest["counts"], manifest["timings"], manifest["routes"]
    lines = [f"run {manifest['run_id']} ({manifest['config']['mode']}, {manifest['config']['benchmark']})"]
    lines.append("routing: " + "  ".join(f"{k}={v}" for k, v in routes.items() if v or k in ("MV1", "MV2", "RT")))
    lines += [f"{m['metric']}[{m['subset']}] = {m['value']:.4f} (n={m['n']})" for m in manifest["metrics"]
              if m["subset"] == "overall"]
    lines.append("output tokens per stage: " + "  ".join(
        f"{name}={int(s['output_tokens'])} ({s['mean_output_tokens']:.1f}/gen)" for name, s in manifest["stages"].items()))
    lines.append(f"generations: {counts['generations_computed']} computed, {counts['generations_reused']} reused "
                 f"(of {counts['generations_needed']})")
    lines.append(f"samples: {counts['valid']} valid, {counts['errors']} with errors")
    lines += [f"  error {e['sample_id']}: {e['error']}" for e in manifest["errors"][:10]]
    lines.append(f"wall time: {timings['wall_s']:.1f} s (model generate {timings['engine_generate_s']:.1f} s, "
                 f"model load {timings['model_load_s']:.1f} s)")
    return "\n".join(lines + _backend_lines(manifest["backend"]))


def _backend_lines(backend: BackendReport) -> list[str]:
    lines = [f"vLLM {server['model']}: {server['url']} ({server['owner']}), log {server['log_path']}"
             for server in backend["servers"]]
    if backend["servers"] or backend["restarts"]:
        lines.append(f"vLLM server restarts during the run: {backend['restarts']}")
    return lines


def format_rows(columns: list[str], rows: Sequence[tuple[object, ...]], style: str) -> str:
    """`style` is table (aligned, with a row count), csv or json (a list of objects)."""
    if style == "json":
        return json.dumps([dict(zip(columns, row)) for row in rows], indent=2, default=str)
    if style == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines + [f"({len(rows)} rows)"])


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "NULL" if value is None else str(value)
