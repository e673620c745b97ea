"""Paper figure 1: (a) latency against output tokens per model (equation 27 under each stored latency profile:
TTFT plus output tokens over the decoding speed), (b-d) each run's headline metric against its mean output tokens
per sample, a model's single runs joined S -> E -> R.

Readable at 20+ runs: labels are placed where they collide with nothing (`charts.place_labels`), and a point
without room for its label keeps its hover label and its row in the table beside the chart."""

from __future__ import annotations

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
    subplots,
)
from mai.dashboards.sections import Store
from mai.dashboards.views import fetch, run_label, run_models

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

    benchmark: str
    models: str
    setting: str
    metric: str
    value: float
    tokens: float
    run_id: str
    prompt: str | None  # a single-model run's prompt (S, E, R), joined in that order
    data: str           # its comparison group (mai.dashboards.groups): runs on other samples are not joined

    @property
    def percent(self) -> float:
        return 100 * self.value


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
                     store.sample_sets[run["run_id"]].label)
            for run in store.runs if run["run_id"] in store.headline and run["n_valid"]
            and run["run_id"] in store.sample_sets]
    for group in sorted({r.data for r in rows}):  # one panel per comparison group: no panel mixes sample sets
        mine = [r for r in rows if r.data == group]
        section.figures.append(_accuracy_panel(mine, store.sample_sets[mine[0].run_id].key))
    section.tables.append(Table(["group", "models", "setting", "metric", "value %", "tokens / sample", "run"],
                                [[r.data, r.models, r.setting, r.metric, f"{r.percent:.1f}", f"{r.tokens:.1f}",
                                  r.run_id] for r in rows], wrap=("group",)))
    return section


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


def _accuracy_panel(mine: list[RunPoint], group: str) -> go.Figure:
    x_range, y_range = axis_range([r.tokens for r in mine], True), axis_range([r.percent for r in mine], False)
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
    title = f"{mine[0].data}: {mine[0].metric} against mean output tokens per sample"
    return layout(fig, title, group, height=HEIGHT, margin=MARGIN,
                  xaxis={"title": "mean output tokens per sample (log)", "type": "log", "range": list(x_range)},
                  yaxis={"title": f"{mine[0].metric} (%)", "range": list(y_range)},
                  legend={"orientation": "h", "y": -0.25, "x": 0})


def _prompt_lines(points: list[RunPoint]) -> list[list[RunPoint]]:
    """A model's single runs of one group, S -> E -> R (the latest run of each prompt)."""
    latest = {r.prompt: r for r in points if r.prompt in PROMPT_ORDER}  # oldest first
    steps = sorted(latest.values(), key=lambda r: PROMPT_ORDER[r.prompt or "S"])
    return [steps] if len(steps) > 1 else []
