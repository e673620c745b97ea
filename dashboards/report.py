"""`mai report`: the paper's figures and tables from the store, in one self-contained HTML file.

Built only from the catalog views, one section module each: figure 1 (latency and accuracy against output tokens),
tables 5, 7, 8, 13, 14 (tokens and scores per model and prompt), the routing funnel (table 10), S2 vs non-S2
(tables 6, 15), the sparse transfer layer sweep and attention (table 9, figures 3-5, table 16), latency profiles,
estimated and measured time and speed-ups (tables 1-4, 11, 12), the routing-policy lab, the runs' provenance and
unparsed answers, the trace browser, and, for two runs, run vs run. Each paper item is a subsection headed
"Figure N" / "Table N", with a note and the command that stores its runs where the report's runs cannot fill it.

Why Plotly, with plotly.js inlined: the report must open offline (from a CI artifact, an e-mail, a laptop on a
train), so every script is in the file and nothing is fetched. The `plotly` wheel ships plotly.js itself
(`plotly.offline.get_plotlyjs()`, 4.8 MB minified) and builds figures in Python with validation, so one pip
dependency gives both the figure API and the offline bundle. Altair / Vega-Lite would need vega, vega-lite and
vega-embed vendored separately (Altair's inline mode fetches them through `vl-convert`, a large native
package), and hand-written SVG would be ours to maintain. Plotly's charts are interactive (hover, zoom, legend
toggles), which is what a researcher reading traces of a few hundred samples wants. plotly.js is most of the
file's size; the data is small (a trace browser over a large store pages its samples, see `traces`).
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TypedDict

import plotly.io as pio

from mai.dashboards import (
    figure_one,
    latency_section,
    paper_tables,
    result_sections,
    sections,
    transfer_section,
)
from mai.dashboards.charts import Cell, Hover, Section, Table
from mai.dashboards.export import cell_text, export_tables
from mai.dashboards.traces import DEFAULT_LIMIT, trace_section
from mai.dashboards.views import session
from mai.errors import ConfigError
from mai.files import write_atomically
from mai.storage.paths import Home


class Built(TypedDict):
    """What `build_report` wrote (also `mai report --json`)."""

    path: str
    bytes: int
    seconds: float
    runs: int
    sections: list[str]
    trace_samples: int
    tables: list[str]  # the files `tables` (`mai report --tables DIR`) received: CSV and LaTeX per table, index.csv
    notes: list[str]   # what a reader must know about the numbers (`mai report` prints each as a `note:` line)


def build_report(home: Home, run_ids: Sequence[str] | None, out: Path, trace_samples: int = DEFAULT_LIMIT,
                 compare: Sequence[str] = (), tables: Path | None = None) -> Built:
    """Write the report over `run_ids` (None: every completed run) to `out`. `compare` (run A, run B) adds the
    run-vs-run section (B against A); exactly two run ids and no `compare` compare those two. `tables`: a folder
    that receives every table as CSV and LaTeX (mai.dashboards.export)."""
    started = time.perf_counter()
    if tables is not None and tables.exists() and not tables.is_dir():  # before any work: nothing is half written
        raise ConfigError(f"--tables {tables} is a file: give a folder (it is created if missing)")
    with session(home):
        store = sections.read_store(home, run_ids)
        # two run ids alone compare those runs when they are of one benchmark (runs of two share no sample to pair)
        one_benchmark = len({r["benchmark"] for r in store.runs}) == 1
        pair = list(compare) or (list(run_ids) if run_ids is not None and len(run_ids) == 2 and one_benchmark else [])
        if pair and len(pair) != 2:
            raise ConfigError(f"compare takes two runs (A and B), got {len(pair)}")
        if run_ids is not None or pair:
            unknown = sorted((set(run_ids or []) | set(pair)) - {r["run_id"] for r in store.all_runs})
            if unknown:
                raise ConfigError(f"no completed run {', '.join(repr(u) for u in unknown)} in {home.root}")
        if not store.runs:
            raise ConfigError(f"no completed run in {home.root}: nothing to report (`mai run` stores one)")
        parts = [figure_one.figure_one(store), paper_tables.tokens_and_scores(store), sections.routing_funnel(store),
                 sections.s2_toggle(store), transfer_section.transfer(store), latency_section.latency(store),
                 result_sections.policy_lab(store), paper_tables.runs_record(store)]
        if pair:
            parts.append(result_sections.comparison(store, pair[0], pair[1]))
        traces, trace_json = trace_section(store, trace_samples, pair)
        parts.append(traces)
        page = render_page(home, store, parts, trace_json)
        exported = export_tables(parts, tables, group_hovers(store)) if tables is not None else []
    write_atomically(out, page)
    return {"path": str(out), "bytes": out.stat().st_size, "seconds": time.perf_counter() - started,
            "runs": len(store.runs), "sections": [p.key for p in parts],
            "trace_samples": len(json.loads(trace_json)["samples"]), "tables": [str(p) for p in exported],
            "notes": [note for note in (store.missing_note(),) if note]}


def group_hovers(store: sections.Store) -> dict[str, str]:
    """A comparison group's key -> the hashes that pin its exact samples (its captions' tooltip)."""
    return {group.key: group.hashes for group in store.sample_sets.values()}


def _asset(name: str) -> str:
    return resources.files("mai.dashboards").joinpath(name).read_text(encoding="utf-8")


def _script_json(text: str) -> str:
    """JSON inside <script> holds no `<`, `>` or `&` (each written as its \\u escape, the same string to JSON.parse):
    the HTML tokenizer changes state inside a script element only at a `<`, so no store string (`</script>`, or
    `<!--<script>`, after which `</script>` no longer ends the element) can end it early or swallow the page's
    later scripts."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(home: Home, store: sections.Store, parts: list[Section], trace_json: str) -> str:
    from plotly.offline import get_plotlyjs

    figures: dict[str, object] = {}  # chart id -> the figure as plotly.js reads it (JSON)
    bodies = [_section_html(part, figures, group_hovers(store)) for part in parts]
    nav = " ".join(f'<a href="#{p.key}">{html.escape(p.title.split(" (")[0])}</a>' for p in parts)
    created = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    benchmarks = ", ".join(sorted({r["benchmark"] for r in store.runs}))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:; font-src data:">
<title>mai report: {html.escape(benchmarks)}</title>
<style>{_asset("report.css")}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<header><h1>mai report</h1><p>{len(store.runs)} runs ({html.escape(benchmarks)}) from the store
<code>{html.escape(str(home.root))}</code>, built {created}. Every figure is read from the catalog views; every
script is in this file (it opens offline).</p>{_missing(store)}<nav>{nav}</nav>{_group_filter(store)}</header>
{"".join(bodies)}
<script type="application/json" id="chart-data">{_script_json(json.dumps(figures, separators=(",", ":")))}</script>
<script type="application/json" id="trace-data">{_script_json(trace_json)}</script>
<script>{_CHARTS}{_GROUP_FILTER}</script>
<script>{_asset("traces.js")}</script>
</body></html>
"""


def _missing(store: sections.Store) -> str:
    note = store.missing_note()
    return f'<p class="note warning">{html.escape(note)}</p>' if note else ""


# draws every chart; `data-drawn` says how many marks (points, bars, boxes, lines, heatmaps) it drew, for tests and
# for readers
_CHARTS = """
(function () {
  const figures = JSON.parse(document.getElementById("chart-data").textContent);
  for (const [id, figure] of Object.entries(figures)) {
    const element = document.getElementById(id);
    Plotly.newPlot(element, figure.data, figure.layout, {displaylogo: false, responsive: true}).then(() => {
      element.dataset.drawn = String(element.querySelectorAll(
        ".scatterlayer .point, .barlayer .point, .boxlayer .box, .scatterlayer .js-line, .heatmaplayer .hm").length);
    });
  }
})();
"""


def _group_filter(store: sections.Store) -> str:
    """A selector that shows one comparison group's tables and charts (mai.dashboards.groups) and hides the others'
    (the runs' own sections, the policy lab and the trace browser stay)."""
    groups = store.groups()
    if len(groups) < 2:
        return ""
    options = "".join(f'<option value="{html.escape(g.key)}" title="{html.escape(g.hashes)}">{html.escape(g.label)}'
                      "</option>" for g in groups)
    return (f'<p><label>Comparison group: <select id="group-filter"><option value="">every group ({len(groups)})'
            f"</option>{options}</select></label></p>")


# the group filter: hides every table and chart of another group than the one chosen
_GROUP_FILTER = """
(function () {
  const filter = document.getElementById("group-filter");
  if (!filter) return;
  filter.addEventListener("change", () => {
    for (const element of document.querySelectorAll("[data-group]")) {
      (element.closest(".table-wrap") || element).hidden = filter.value !== "" && element.dataset.group !== filter.value;
    }
    window.dispatchEvent(new Event("resize"));  // charts shown again take their width
  });
})();
"""


def _section_html(part: Section, figures: dict[str, object], hovers: dict[str, str], level: int = 2) -> str:
    """A section (h2) or a paper item inside one (h3), its charts' figures added to `figures` by chart id."""
    charts = ""
    for number, chart in enumerate(part.figures):
        chart_id = f"{part.key}-chart-{number}"
        drawn = json.loads(pio.to_json(chart, validate=False))
        figures[chart_id] = drawn
        meta = drawn["layout"].get("meta")
        group = f' data-group="{html.escape(meta["group"])}"' if isinstance(meta, dict) and "group" in meta else ""
        charts += f'<div class="chart" id="{chart_id}"{group}></div>'

    notes = "".join(f'<p class="note">{note}</p>' for note in part.notes)
    tables = "".join(_table_html(t, hovers.get(t.group, "")) for t in part.tables)
    intro = f'<p class="intro">{html.escape(part.intro)}</p>' if part.intro else ""
    children = "".join(_section_html(child, figures, hovers, 3) for child in part.children)
    tag = "section" if level == 2 else "div"
    return (f'<{tag} id="{part.key}" class="level-{level}"><h{level}>{html.escape(part.title)}</h{level}>{intro}'
            f"{notes}{charts}{part.html}{tables}{children}</{tag}>\n")


def _table_html(table: Table, hover: str = "") -> str:
    """A table; `hover`: its caption's tooltip (the hashes that pin a comparison group's exact samples)."""
    if not table.rows:
        return f'<p class="note">{html.escape(table.caption)}: none.</p>' if table.caption else ""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    classes = table.classes or [""] * len(table.rows)
    wrapped = [' class="text"' if c in table.wrap else ' class="score"' if c in table.scored else ''
               for c in table.columns]
    unscored = [' class="text"' if c in table.wrap else '' for c in table.columns]
    rows = "".join(f'<tr class="{c}">' + "".join(f"<td{w}>{_cell(v)}</td>" for v, w in zip(
        row, unscored if i in table.unscored_rows else wrapped)) + "</tr>"
                   for i, (row, c) in enumerate(zip(table.rows, classes)))
    title = f' title="{html.escape(hover)}"' if hover else ""
    caption = f"<caption{title}>{html.escape(table.caption)}</caption>" if table.caption else ""
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in table.footnotes)
    footer = f'<tfoot><tr><td colspan="{len(table.columns)}"><ol class="footnotes">{notes}</ol></td></tr></tfoot>' \
        if notes else ""
    group = (f' data-group="{html.escape(table.group)}" data-runs="{html.escape(" ".join(table.runs))}"'
             if table.group else "")
    return (f'<div class="table-wrap"><table{group}>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody>'
            f"{footer}</table></div>")


def _cell(value: Cell) -> str:
    if isinstance(value, Hover):
        return f'<span title="{html.escape(value.title)}">{html.escape(value.text)}</span>'
    return html.escape(cell_text(value))
