"""The pieces a report section is made of: a `Section` (Plotly figures, tables, notes) and its `Table`s, and the
figure helpers every section draws with (one light template, labels that do not overlap)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mai.dashboards.rounding import fixed

COLORS = {"MV1": "#2a9d8f", "MV2": "#e9c46a", "RT": "#e76f51", "ERROR": "#6c757d", "SINGLE": "#457b9d"}


@dataclass(frozen=True)
class Hover:
    """A cell whose text is what a paper's table shows, with more in its tooltip (the run ids behind it)."""

    text: str
    title: str

    def __str__(self) -> str:
        return self.text


Cell = str | int | float | None | Hover  # what a table cell shows (report.py formats floats and None)
# a cell with no number, its footnote saying why (a paper's table has a number or a dash in every cell)
DASH = "\u2014"


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    classes: list[str] = field(default_factory=list)  # per row: '' or 'warning'
    wrap: tuple[str, ...] = ()  # columns of prose, wrapped (others stay on one line)
    # a table of one comparison group (mai.dashboards.groups): its key, and every run its cells read
    group: str = ""
    runs: list[str] = field(default_factory=list)
    scored: tuple[str, ...] = ()  # columns of score cells ('83.1 [76.5, 88.9] n=160')
    unscored_rows: tuple[int, ...] = ()  # rows whose cells in those columns are no scores (table 9's token counts)
    # notes under the table, each once (a machine and load shared by the group, what a mark in a cell means)
    footnotes: list[str] = field(default_factory=list)
    # the columns (and the first rows) of a narrow variant the export writes beside the table: the paper's own
    # columns of a wide table, for one column of a two-column page (empty: none)
    narrow: tuple[str, ...] = ()
    narrow_rows: int | None = None

    def noted(self, text: str, footnote: str) -> str:
        """`text` with the mark of `footnote` (added under the table once, however many cells it explains); `text`
        as it is without one."""
        if not footnote:
            return text
        if footnote not in self.footnotes:
            self.footnotes.append(footnote)
        return text + mark(self.footnotes.index(footnote) + 1)


@dataclass
class Section:
    key: str
    title: str
    intro: str
    figures: list[go.Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    html: str = ""  # a section's own markup (the trace browser)
    # the paper items it reproduces, each a subsection headed "Figure N" / "Table N" (rendered after its own parts)
    children: list[Section] = field(default_factory=list)

    def child(self, key: str, title: str, intro: str = "") -> Section:
        """A new subsection, headed by the paper item it reproduces ("Table 11 · ...")."""
        self.children.append(Section(key, title, intro))
        return self.children[-1]


# plotly_white's look in a few keys: assigning the named template deep-copies ~6 KB per figure (~30 ms each)
_AXIS = {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "linecolor": "#ebf0f8", "automargin": True}
PALETTE = ("#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF",
           "#FECB52")
TEMPLATE = go.layout.Template(layout={
    "colorway": list(PALETTE),
    "font": {"color": "#2a3f5f"}, "paper_bgcolor": "white", "plot_bgcolor": "white", "xaxis": _AXIS,
    "yaxis": _AXIS, "hovermode": "closest", "title": {"x": 0.05}})


# plotly's own objects are untyped: traces and layout options pass through as they are
def figure(*traces: Any) -> go.Figure:
    return go.Figure(list(traces), layout={"template": TEMPLATE})


def subplots(**options: Any) -> go.Figure:
    return make_subplots(figure=figure(), **options)


def layout(fig: go.Figure, title: str, group: str = "", **extra: Any) -> go.Figure:
    """The figure's title, size and options; `group`: the comparison group it draws (mai.dashboards.groups), kept in
    its layout's `meta` for the report's group filter."""
    if group:
        extra["meta"] = {"group": group}
    fig.update_layout(title=title, height=extra.pop("height", 420),
                      margin=extra.pop("margin", {"l": 60, "r": 20, "t": 60, "b": 50}), **extra)
    return fig


# Scatter labels that never collide: the axes' ranges are set in Python (`axis_range`), so a label's box in pixels
# is known before plotly.js draws it; each label takes the first position (above, below, right, left of its point)
# that meets no placed label, no point and stays inside the plot, else it is left off (the point keeps its hover
# label). The plot area assumed is the narrowest the report gives a chart.
PLOT_WIDTH, PLOT_HEIGHT, HEIGHT, MARGIN = 860.0, 300.0, 500, {"l": 70, "r": 30, "t": 60, "b": 140}
CHAR_PX, LINE_PX, MARKER_PX = 7.0, 15.0, 7.0
POSITIONS = ("top center", "bottom center", "middle right", "middle left")


def axis_range(values: Sequence[float], log: bool) -> tuple[float, float]:
    points = [math.log10(max(v, 1e-3)) if log else v for v in values]
    low, high = min(points), max(points)
    pad = (high - low) * 0.08 or (0.3 if log else 2.0)
    return low - pad, high + pad


def place_labels(xs: Sequence[float], ys: Sequence[float], labels: Sequence[str], x_range: tuple[float, float],
                 y_range: tuple[float, float], log_x: bool) -> list[tuple[str, str]]:
    """(text, textposition) per point: the first position whose box meets no placed label, no point and stays
    inside the plot, else no text."""
    def pixel(x: float, y: float) -> tuple[float, float]:
        u = math.log10(max(x, 1e-3)) if log_x else x
        return ((u - x_range[0]) / (x_range[1] - x_range[0]) * PLOT_WIDTH,
                (y_range[1] - y) / (y_range[1] - y_range[0]) * PLOT_HEIGHT)

    points = [pixel(x, y) for x, y in zip(xs, ys)]
    boxes = [(px - MARKER_PX, py - MARKER_PX, px + MARKER_PX, py + MARKER_PX) for px, py in points]
    placed: list[tuple[str, str]] = []
    for (px, py), label in zip(points, labels):
        width, height = CHAR_PX * len(label) + 4, LINE_PX
        candidates = {"top center": (px - width / 2, py - MARKER_PX - height, px + width / 2, py - MARKER_PX),
                      "bottom center": (px - width / 2, py + MARKER_PX, px + width / 2, py + MARKER_PX + height),
                      "middle right": (px + MARKER_PX, py - height / 2, px + MARKER_PX + width, py + height / 2),
                      "middle left": (px - MARKER_PX - width, py - height / 2, px - MARKER_PX, py + height / 2)}
        choice = next((p for p in POSITIONS if _inside(candidates[p]) and not any(
            _overlap(candidates[p], b) for b in boxes if b != (px - MARKER_PX, py - MARKER_PX, px + MARKER_PX,
                                                                 py + MARKER_PX))), None)
        if choice is None:
            placed.append(("", "top center"))
            continue
        boxes.append(candidates[choice])
        placed.append((label, choice))
    return placed


def shared_labels(xs: Sequence[float], ys: Sequence[float], names: Sequence[str]) -> list[str]:
    """Each point's label; points drawn at one place (to the first decimal) share one label naming them all
    ('MAI x3, MAI sparse L1'), written on the first of them only, so no label hides under another."""
    at: dict[tuple[float, float], list[int]] = {}
    for index, (x, y) in enumerate(zip(xs, ys)):
        at.setdefault((round(x, 1), round(y, 1)), []).append(index)
    labels = []
    for index, (x, y) in enumerate(zip(xs, ys)):
        together = at[(round(x, 1), round(y, 1))]
        shown = list(dict.fromkeys(names[i] for i in together))
        counts = {name: sum(names[i] == name for i in together) for name in shown}
        labels.append(", ".join(f"{n} x{counts[n]}" if counts[n] > 1 else n for n in shown)
                      if together[0] == index else "")
    return labels


def _inside(box: tuple[float, float, float, float]) -> bool:
    return box[0] >= 0 and box[1] >= 0 and box[2] <= PLOT_WIDTH and box[3] <= PLOT_HEIGHT


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def short(run_id: str) -> str:
    return run_id[-6:]


def num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else fixed(value, digits)


def score_range(percents: Sequence[float]) -> list[float] | None:
    """A bar chart's score axis: from a little under the lowest bar when the bars differ by a few points (from 0
    they would look equal), else plotly's own range (None). The axis then does not start at 0: its ticks say so."""
    if not percents:
        return None
    low, high = min(percents), max(percents)
    if low < 20 or high - low > 0.5 * high:
        return None
    pad = max(2.0, 0.25 * (high - low))
    return [max(0.0, low - 2 * pad), min(100.0, high + pad)]


_SUPERSCRIPTS = "¹²³⁴⁵⁶⁷⁸⁹"


def mark(number: int) -> str:
    """A footnote's mark in a cell, by its number from 1 ('¹'; the LaTeX export writes \\textsuperscript)."""
    return _SUPERSCRIPTS[number - 1] if 1 <= number <= len(_SUPERSCRIPTS) else f"[{number}]"
