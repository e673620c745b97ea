"""The pieces a report section is made of: a `Section` (Plotly figures, tables, notes) and its `Table`s, and the
figure helpers every section draws with (one light template, labels that do not overlap)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

COLORS = {"MV1": "#2a9d8f", "MV2": "#e9c46a", "RT": "#e76f51", "ERROR": "#6c757d", "SINGLE": "#457b9d"}

Cell = str | int | float | None  # what a table cell shows (report.py formats floats and None)


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    classes: list[str] = field(default_factory=list)  # per row: '' or 'warning'
    wrap: tuple[str, ...] = ()  # columns of prose, wrapped (others stay on one line)


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


def layout(fig: go.Figure, title: str, **extra: Any) -> go.Figure:
    fig.update_layout(title=title, height=extra.pop("height", 420),
                      margin=extra.pop("margin", {"l": 60, "r": 20, "t": 60, "b": 50}), **extra)
    return fig


def merged_labels(xs: Sequence[float], ys: Sequence[float], labels: Sequence[str], log_x: bool = False
                  ) -> list[str]:
    """Text labels for a scatter where points that (nearly) coincide share one label, stacked, on the first of
    them: overlapping labels are unreadable. Closeness is measured on the axes' normalised ranges."""
    def scale(values: Sequence[float], log: bool) -> list[float]:
        points = [math.log10(max(v, 1e-9)) if log else v for v in values]
        low, high = min(points, default=0.0), max(points, default=0.0)
        return [(v - low) / (high - low) if high > low else 0.0 for v in points]

    px, py = scale(xs, log_x), scale(ys, False)
    texts = [""] * len(labels)
    owner: list[int] = []
    for i in range(len(labels)):
        near = next((j for j in owner if abs(px[i] - px[j]) < 0.04 and abs(py[i] - py[j]) < 0.04), None)
        if near is None:
            owner.append(i)
            texts[i] = labels[i]
        else:
            texts[near] += "<br>" + labels[i]
    return texts


def short(run_id: str) -> str:
    return run_id[-6:]


def num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


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
