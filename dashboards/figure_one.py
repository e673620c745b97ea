"""Paper figure 1: (a) latency against output tokens per model (equation 27 under each stored latency profile:
TTFT plus output tokens over the decoding speed), (b-d) each run's headline metric against its mean output tokens
per sample, a model's single runs joined S -> E -> R.

Readable at 20+ runs: the axes' ranges are set here, so a label's box in pixels is known before plotly.js draws
it; labels are placed greedily (above, below, right, left of their point) where they collide with no other label,
point or the plot's edge, and left off otherwise (every point keeps its hover label and its row in the table
beside the chart)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from mai.dashboards.charts import PALETTE, Section, Table, figure, layout
from mai.dashboards.rows import LatencyPointRow
from mai.dashboards.sections import Store
from mai.dashboards.views import fetch, run_label, run_models

# the plot area the label placement assumes (pixels): the narrowest the report's layout gives a chart
PLOT_WIDTH, PLOT_HEIGHT, HEIGHT, MARGIN = 860.0, 300.0, 500, {"l": 70, "r": 30, "t": 60, "b": 140}
CHAR_PX, LINE_PX, MARKER_PX = 7.0, 15.0, 7.0
POSITIONS = ("top center", "bottom center", "middle right", "middle left")
PROMPT_ORDER = {"S": 0, "E": 1, "R": 2}
OUTPUT_TOKENS = (1, 64, 128, 256, 512, 1024)
SPEEDS = "SELECT profile_name, model, avg(tokens_per_s) AS tokens_per_s, arg_min(ttft_ms, input_tokens) AS ttft_ms " \
         "FROM latency_profiles WHERE tokens_per_s IS NOT NULL GROUP BY ALL ORDER BY profile_name"


@dataclass(frozen=True)
class RunPoint:
    """A run on figure 1: its headline metric against its mean output tokens per sample."""

    benchmark: str
    models: str
    setting: str
    metric: str
    value: float
    tokens: float
    run_id: str
    prompt: str | None  # a single-model run's prompt (S, E, R), joined in that order
    data: str           # the data it ran on (runs on other samples are not joined)

    @property
    def percent(self) -> float:
        return 100 * self.value


def _range(values: Sequence[float], log: bool) -> tuple[float, float]:
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


def _inside(box: tuple[float, float, float, float]) -> bool:
    return box[0] >= 0 and box[1] >= 0 and box[2] <= PLOT_WIDTH and box[3] <= PLOT_HEIGHT


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def figure_one(store: Store) -> Section:
    section = Section("figure-1", "Figure 1 · Efficiency emerges with scale",
                      "(a) Latency against output tokens per model, from each stored latency profile (TTFT at its "
                      "shortest input plus output tokens over its decoding speed). (b-d) One point per run: the "
                      "headline metric (F1 for POPE, else the benchmark's accuracy or ANLS, default scorer profile) "
                      "against the mean output tokens per sample of every generation the run used; colour: the model "
                      "or pair; a model's single runs are joined S -> E -> R. Points whose label has no room keep "
                      "their hover label and their row in the table.")
    _latency_panel(store, section)
    rows = [RunPoint(run["benchmark"], run_models(run), run_label(run), *store.headline[run["run_id"]],
                     store.tokens.get(run["run_id"], 0) / run["n_valid"], run["run_id"],
                     run["single_prompt"] if run["mode"] == "single" and not run["s2"] else None,
                     f"{run['dataset_fingerprint']}/{run['n_samples']}")
            for run in store.runs if run["run_id"] in store.headline and run["n_valid"]]
    for benchmark in sorted({r.benchmark for r in rows}):
        section.figures.append(_accuracy_panel([r for r in rows if r.benchmark == benchmark]))
    section.tables.append(Table(["benchmark", "models", "setting", "metric", "value %", "tokens / sample", "run"],
                                [[r.benchmark, r.models, r.setting, r.metric, f"{r.percent:.1f}", f"{r.tokens:.1f}",
                                  r.run_id] for r in rows]))
    return section


def _latency_panel(store: Store, section: Section) -> None:
    speeds = fetch(store.home, LatencyPointRow, SPEEDS)
    if not speeds:
        section.notes.append("Figure 1 (a) needs a latency profile: <code>mai import-profile "
                             "docs/paper_latency_h100.csv --name h100-8b --model Qwen3-VL-8B</code> or <code>mai "
                             "profile MODEL --name NAME</code>.")
        return
    fig = figure()
    for p in speeds:
        speed, ttft = float(p["tokens_per_s"] or 1.0), float(p["ttft_ms"] or 0.0) / 1000
        fig.add_trace(go.Scatter(x=list(OUTPUT_TOKENS), y=[ttft + n / speed for n in OUTPUT_TOKENS],
                                 mode="lines+markers", name=f"{p['model']} ({p['profile_name']})"))
    section.figures.append(layout(fig, "(a) Latency against output tokens", xaxis={"title": "output tokens"},
                                  yaxis={"title": "seconds per request"}))


def _accuracy_panel(mine: list[RunPoint]) -> go.Figure:
    x_range, y_range = _range([r.tokens for r in mine], True), _range([r.percent for r in mine], False)
    placed = dict(zip((r.run_id for r in mine), place_labels([r.tokens for r in mine], [r.percent for r in mine],
                                                             [r.setting for r in mine], x_range, y_range, True)))
    fig = figure()
    by_models: dict[str, list[RunPoint]] = defaultdict(list)
    for r in mine:
        by_models[r.models].append(r)
    for index, (models, points) in enumerate(sorted(by_models.items())):
        colour = PALETTE[index % len(PALETTE)]
        fig.add_trace(go.Scatter(x=[r.tokens for r in points], y=[r.percent for r in points], mode="markers+text",
                                 name=models, legendgroup=models, text=[placed[r.run_id][0] for r in points],
                                 textposition=[placed[r.run_id][1] for r in points], cliponaxis=False,
                                 marker={"size": 11, "color": colour}, customdata=[[r.setting, r.run_id] for r in points],
                                 hovertemplate="%{customdata[0]}: %{y:.1f} at %{x:.1f} tokens<br>"
                                               "%{customdata[1]}<extra></extra>"))
        for steps in _prompt_lines(points):
            fig.add_trace(go.Scatter(x=[r.tokens for r in steps], y=[r.percent for r in steps], mode="lines",
                                     line={"dash": "dot", "width": 1, "color": colour}, legendgroup=models,
                                     showlegend=False, hoverinfo="skip", name=f"{models} S -> E -> R"))
    title = f"({mine[0].benchmark}) {mine[0].metric} against mean output tokens per sample"
    return layout(fig, title, height=HEIGHT, margin=MARGIN,
                  xaxis={"title": "mean output tokens per sample (log)", "type": "log", "range": list(x_range)},
                  yaxis={"title": f"{mine[0].metric} (%)", "range": list(y_range)},
                  legend={"orientation": "h", "y": -0.25, "x": 0})


def _prompt_lines(points: list[RunPoint]) -> list[list[RunPoint]]:
    """A model's single runs on one data set, S -> E -> R (the latest run of each prompt): runs on other samples
    are other lines."""
    lines = []
    for data in sorted({r.data for r in points}):
        latest = {r.prompt: r for r in points if r.data == data and r.prompt in PROMPT_ORDER}  # oldest first
        steps = sorted(latest.values(), key=lambda r: PROMPT_ORDER[r.prompt or "S"])
        if len(steps) > 1:
            lines.append(steps)
    return lines
