"""Paper figure 1: (a) latency against output tokens per model (equation 27 under each stored latency profile:
TTFT plus output tokens over the decoding speed), (b-d) each run's headline metric against its mean output tokens
per sample, a model's single runs joined S -> E -> R.

Readable at 20+ runs: labels are placed where they collide with nothing (`charts.place_labels`), and a point
without room for its label keeps its hover label and its row in the table beside the chart."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TypedDict

import plotly.graph_objects as go

from mai.dashboards.charts import (
    HEIGHT,
    MARGIN,
    PALETTE,
    Section,
    Table,
    axis_range,
    figure,
    layout,
    place_labels,
    shared_labels,
    subplots,
)
from mai.dashboards.groups import given_name, interval_cell
from mai.dashboards.rounding import fixed
from mai.dashboards.sections import Store
from mai.dashboards.views import fetch, run_label, run_models
from mai.paired import mean_interval
from mai.storage.rows import RunRow

PROMPT_ORDER = {"S": 0, "E": 1, "R": 2}
OUTPUT_TOKENS = (1, 64, 128, 256, 512, 1024)
SPEEDS = "SELECT profile_name, model, coalesce(hardware, '?') AS hardware, avg(tokens_per_s) AS tokens_per_s, " \
         "arg_min(ttft_ms, input_tokens) AS ttft_ms " \
         "FROM latency_profiles WHERE tokens_per_s IS NOT NULL GROUP BY ALL ORDER BY hardware, profile_name"


class SpeedRow(TypedDict):
    profile_name: str
    model: str
    hardware: str
    tokens_per_s: float
    ttft_ms: float | None


@dataclass(frozen=True)
class RunPoint:
    """A run on figure 1: its headline metric against its mean output tokens per sample."""

    models: str
    setting: str
    metric: str
    value: float
    tokens: float
    run_id: str
    prompt: str | None  # a single-model run's prompt (S, E, R), joined in that order
    data: str           # its comparison group (mai.dashboards.groups): runs on other samples are not joined
    interval: tuple[float, float] | None  # the 95 % interval of the mean per-sample score (None: no mean, F1)
    n: int

    @property
    def percent(self) -> float:
        return 100 * self.value

    @property
    def cell(self) -> str:
        """'83.1 [76.5, 88.9] n=160', or the value and n where the headline is no mean (F1)."""
        if self.interval is None:
            return f"{fixed(self.percent, 1)} n={self.n}"
        return interval_cell(self.value, self.interval, self.n)


def figure_one(store: Store) -> Section:
    section = Section("figure-1", "Figure 1 · Efficiency emerges with scale",
                      "(a) Latency against output tokens per model, from each stored latency profile (TTFT at its "
                      "shortest input plus output tokens over its decoding speed). (b-d) One point per run: the "
                      "headline metric (F1 for POPE, else the benchmark's accuracy or ANLS, default scorer profile) "
                      "against the mean output tokens per sample of every generation the run used; colour: the model "
                      "or pair; a model's single runs are joined S -> E -> R. Points whose label has no room keep "
                      "their hover label and their row in the table.")
    _latency_panel(store, section)
    rows = [_point(store, run) for run in store.runs if run["run_id"] in store.headline and run["n_valid"]
            and run["run_id"] in store.sample_sets and not store.lost(run["run_id"])]
    lost = [f"{run['run_id']} ({store.lost(run['run_id'])})" for run in store.runs if store.lost(run["run_id"])]
    if lost:  # their token counts would add up only the outputs left
        section.notes.append("Left out, their stored outputs are not all there: " + ", ".join(lost) + ".")
    for group in sorted({r.data for r in rows}):  # one panel per comparison group: no panel mixes sample sets
        mine = [r for r in rows if r.data == group]
        section.figures.append(_accuracy_panel(mine, store.sample_sets[mine[0].run_id].key))
    section.tables.append(Table(["group", "models", "setting", "metric", "value %", "tokens / sample", "run"],
                                [[r.data, r.models, r.setting, r.metric, r.cell, f"{fixed(r.tokens, 1)}",
                                  r.run_id] for r in rows], wrap=("group",), scored=("value %",)))
    return section


def _point(store: Store, run: RunRow) -> RunPoint:
    metric, value = store.headline[run["run_id"]]
    scores = list(store.scores.get(run["run_id"], {}).values())
    is_mean = bool(scores) and abs(sum(scores) / len(scores) - value) < 1e-9
    name = given_name(run)
    return RunPoint(run_models(run), run_label(run) + (f" ({name})" if name else ""), metric,
                    value, store.tokens.get(run["run_id"], 0) / run["n_valid"], run["run_id"],
                    run["single_prompt"] if run["mode"] == "single" and not run["s2"] else None,
                    store.sample_sets[run["run_id"]].label, mean_interval(scores) if is_mean else None, len(scores))


def _latency_panel(store: Store, section: Section) -> None:
    speeds = fetch(store.home, SpeedRow, SPEEDS)
    if not speeds:
        section.notes.append("Figure 1 (a) needs a latency profile: <code>mai import-profile "
                             "docs/paper_latency_h100.csv --name h100-8b --model Qwen3-VL-8B</code> or <code>mai "
                             "profile MODEL --name NAME</code>.")
        return
    # one panel per hardware, each with its own axis: a CPU profile would flatten the H100 lines to zero
    machines = sorted({p["hardware"] for p in speeds})
    fig = subplots(rows=1, cols=len(machines), subplot_titles=machines, horizontal_spacing=0.08)
    for column, machine in enumerate(machines, start=1):
        for p in (p for p in speeds if p["hardware"] == machine):
            speed, ttft = float(p["tokens_per_s"] or 1.0), float(p["ttft_ms"] or 0.0) / 1000
            fig.add_trace(go.Scatter(x=list(OUTPUT_TOKENS), y=[ttft + n / speed for n in OUTPUT_TOKENS],
                                     mode="lines+markers", name=f"{p['model']} ({p['profile_name']})"),
                          row=1, col=column)
    fig.update_xaxes(title_text="output tokens")
    fig.update_yaxes(title_text="seconds per request", row=1, col=1)
    section.figures.append(layout(fig, "(a) Latency against output tokens, one panel per hardware"))


def score_axis(points: list[RunPoint]) -> tuple[float, float]:
    """The score axis of a panel: its points and their intervals, within 0-100 %, at least 10 points tall (a panel
    whose runs all scored 0 reads 0-10 %, never -2-2 %)."""
    values = [v for r in points for v in ((100 * r.interval[0], 100 * r.interval[1]) if r.interval else (r.percent,))]
    low, high = axis_range(values, False)
    low, high = max(0.0, low), min(100.0, high)
    if high - low < 10:
        low, high = max(0.0, min(low, high - 10)), min(100.0, max(high, low + 10))
    return low, high


def _accuracy_panel(mine: list[RunPoint], group: str) -> go.Figure:
    x_range, y_range = axis_range([r.tokens for r in mine], True), score_axis(mine)
    placed = dict(zip((r.run_id for r in mine), place_labels([r.tokens for r in mine], [r.percent for r in mine],
                                                             shared_labels([r.tokens for r in mine],
                                                                           [r.percent for r in mine],
                                                                           [r.setting for r in mine]),
                                                             x_range, y_range, True)))
    fig = figure()
    by_models: dict[str, list[RunPoint]] = defaultdict(list)
    for r in mine:
        by_models[r.models].append(r)
    for index, (models, points) in enumerate(sorted(by_models.items())):
        colour = PALETTE[index % len(PALETTE)]
        fig.add_trace(go.Scatter(x=[r.tokens for r in points], y=[r.percent for r in points], mode="markers+text",
                                 name=models, legendgroup=models, text=[placed[r.run_id][0] for r in points],
                                 textposition=[placed[r.run_id][1] for r in points], cliponaxis=False,
                                 marker={"size": 11, "color": colour},
                                 error_y={"type": "data", "symmetric": False,
                                          "array": [100 * r.interval[1] - r.percent if r.interval else 0
                                                    for r in points],
                                          "arrayminus": [r.percent - 100 * r.interval[0] if r.interval else 0
                                                         for r in points], "color": colour, "thickness": 1},
                                 customdata=[[r.setting, r.run_id, r.cell] for r in points],
                                 hovertemplate="%{customdata[0]}: %{customdata[2]} at %{x:.1f} tokens<br>"
                                               "%{customdata[1]}<extra></extra>"))
        for steps in _prompt_lines(points):
            fig.add_trace(go.Scatter(x=[r.tokens for r in steps], y=[r.percent for r in steps], mode="lines",
                                     line={"dash": "dot", "width": 1, "color": colour}, legendgroup=models,
                                     showlegend=False, hoverinfo="skip", name=f"{models} S -> E -> R"))
    title = f"{mine[0].data}: {mine[0].metric} against mean output tokens per sample (bars: 95 % intervals)"
    axis_title = f"{mine[0].metric} (%)" + (f", axis from {fixed(y_range[0], 0)}" if y_range[0] > 0 else "")
    return layout(fig, title, group, height=HEIGHT, margin=MARGIN,
                  xaxis={"title": "mean output tokens per sample (log)", "type": "log", "range": list(x_range),
                         **log_ticks(x_range)},
                  yaxis={"title": axis_title, "range": list(y_range)},
                  legend={"orientation": "h", "y": -0.25, "x": 0})


def log_ticks(x_range: tuple[float, float]) -> dict[str, list[float] | list[str]]:
    """Ticks of a log axis over `x_range` (log10 units) labelled with the values they mark: 1, 2, 5 per decade (every
    digit where that gives fewer than three). plotly's own labels within one decade read '2, 3, 4' for 20, 30, 40."""
    low, high = x_range
    decades = range(math.floor(low), math.ceil(high) + 1)
    for steps in ((1, 2, 5), tuple(range(1, 10))):
        values = [m * 10.0 ** k for k in decades for m in steps if low <= math.log10(m * 10.0 ** k) <= high]
        if len(values) >= 3:
            break
    return {"tickvals": values, "ticktext": [f"{v:g}" for v in values]}


def _prompt_lines(points: list[RunPoint]) -> list[list[RunPoint]]:
    """A model's single runs of one group, S -> E -> R (the latest run of each prompt)."""
    latest = {r.prompt: r for r in points if r.prompt in PROMPT_ORDER}  # oldest first
    steps = sorted(latest.values(), key=lambda r: PROMPT_ORDER[r.prompt or "S"])
    return [steps] if len(steps) > 1 else []
