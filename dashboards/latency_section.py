"""The report's latency section (paper tables 1-4, 11, 12): latency profiles, each run's estimated and measured
time with the speed-up against the large model's R run and Full RT, and the token-level speculative-decoding
baseline. Estimates pair by the models they price (speedup.sql), whatever their names."""

from __future__ import annotations

from collections import defaultdict

import plotly.graph_objects as go
from mai.dashboards.charts import Section, Table, figure, layout, num, short, subplots
from mai.dashboards.latency_tables import add_tables
from mai.dashboards.rows import LatencyPointRow, SpeculativeRow, SpeedupRow
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import Store
from mai.dashboards.time_tables import table_11
from mai.dashboards.time_tables import table_12 as table_12_layout
from mai.dashboards.views import fetch

PROFILES = ("SELECT profile_name, model, coalesce(hardware, '?') AS hardware, input_tokens, query_tokens, "
            "output_tokens, image_resolution, ttft_ms, tokens_per_s, preprocess_ms, vision_ms, decode_ms "
            "FROM latency_profiles ORDER BY profile_name, input_tokens, image_resolution")


def latency(store: Store) -> Section:
    section = Section("latency", "Latency: profiles, estimated and measured time, speed-up (tables 1-4, 11, 12)",
                      "Profiles (measured with `mai profile` or imported from published numbers): TTFT against the "
                      "input length, decoding speed, and, for measured profiles, preprocessing and the vision "
                      "encoder against the image size. Then each run's time: estimated from its stored token "
                      "counts under a profile per model (equation 27, `mai estimate`) and measured (stored per-call "
                      "wall time, batch-amortised), with the speed-up against the large model's R run.")
    profiles = fetch(store.home, LatencyPointRow, PROFILES)
    if profiles:
        section.figures.append(_profiles_figure(profiles))
        measured = [p for p in profiles if p["vision_ms"] is not None]
        if measured:
            section.figures.append(_measured_figure(measured))
    else:
        section.notes.append(f"No latency profile stored: {_PROFILE_COMMAND}.")
    add_tables(section, profiles, _PROFILE_COMMAND)
    rows = [r for r in fetch(store.home, SpeedupRow, load_saved("speedup")) if r["run_id"] in store.run_ids]
    part = section.child("table-11", "Table 11 · Total inference time (s): estimated (equation 27) and measured, "
                                     "MAI vs Full RT")
    table_11(store, part, rows)  # the paper's layout first, then each run's time
    _table_11(part, rows)
    table_12 = section.child("table-12", "Table 12 · Speed-up against the large model's R run (and decoding "
                                         "strategies)")
    table_12_layout(store, table_12, rows, fetch(store.home, SpeculativeRow, SPECULATIVE, [store.run_ids]))
    _table_12(table_12, rows)
    _speculative(store, table_12)
    return section


_PROFILE_COMMAND = ("<code>mai profile MODEL --name NAME</code> measures one on this machine, <code>mai import-profile "
                    "docs/paper_latency_h100.csv --name h100-8b --model Qwen3-VL-8B</code> imports the paper's")
_ESTIMATE_COMMAND = ("<code>mai estimate RUN --small-profile h100-2b --large-profile h100-8b</code> prices a run "
                     "(each run and its large-R baseline)")


def _profiles_figure(profiles: list[LatencyPointRow]) -> go.Figure:
    """TTFT against the input length (the mean over image sizes and outputs per length) and decoding speed."""
    names = sorted({p["profile_name"] for p in profiles})
    fig = subplots(rows=1, cols=2, subplot_titles=("TTFT vs input tokens (tables 3-4)", "decoding speed (tokens / s)"))
    for name in names:
        by_length: dict[int, list[float]] = defaultdict(list)
        models = []
        for p in profiles:
            if p["profile_name"] == name and (ttft := p["ttft_ms"]) is not None:
                by_length[int(p["input_tokens"])].append(float(ttft))
                models.append(p["model"])
        lengths = sorted(by_length)
        fig.add_trace(go.Scatter(x=lengths, y=[sum(by_length[n]) / len(by_length[n]) for n in lengths],
                                 mode="markers+lines", name=f"{name} ({models[0] if models else ''})"), row=1, col=1)
    speeds = [(n, [speed for p in profiles if p["profile_name"] == n and (speed := p["tokens_per_s"])])
              for n in names]
    fig.add_trace(go.Bar(x=[n for n, s in speeds if s], y=[sum(s) / len(s) for _, s in speeds if s],
                         name="tokens / s", showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="input tokens", type="log", row=1, col=1)
    fig.update_yaxes(title_text="TTFT (ms)", row=1, col=1)
    return layout(fig, "Latency profiles")


def _measured_figure(measured: list[LatencyPointRow]) -> go.Figure:
    """Measured profiles: preprocessing, vision encoder and TTFT per image size, decode time per output length."""
    fig = subplots(rows=1, cols=2,
                   subplot_titles=("per image resolution (tables 1-2)", "decode time per output length"))
    for name in sorted({p["profile_name"] for p in measured}):
        mine = [p for p in measured if p["profile_name"] == name]
        per_resolution = {"preprocess_ms": [p["preprocess_ms"] for p in mine],
                          "vision_ms": [p["vision_ms"] for p in mine], "ttft_ms": [p["ttft_ms"] for p in mine]}
        for column, values in per_resolution.items():
            fig.add_trace(go.Scatter(x=[p["image_resolution"] for p in mine], y=values, mode="markers",
                                     name=f"{name}: {column}"), row=1, col=1)
        fig.add_trace(go.Scatter(x=[p["output_tokens"] for p in mine], y=[p["decode_ms"] for p in mine],
                                 mode="markers", name=f"{name}: decode_ms"), row=1, col=2)
    fig.update_xaxes(title_text="image side (px)", row=1, col=1)
    fig.update_xaxes(title_text="output tokens", row=1, col=2)
    fig.update_yaxes(title_text="ms")
    return layout(fig, "Measured profiles: preprocessing, vision encoder, TTFT, decode")


SPECULATIVE = """
    SELECT run_id, large_model, small_model, draft_tokens, count(*) AS samples, avg(acceptance_rate) AS acceptance,
           sum(speculative_wall_s) AS speculative_s, sum(plain_wall_s) AS plain_s,
           sum(plain_wall_s) / sum(speculative_wall_s) AS speedup, bool_and(identical_to_greedy) AS identical
    FROM speculative WHERE list_contains(?, run_id) GROUP BY ALL ORDER BY run_id, draft_tokens
"""


def _speculative(store: Store, section: Section) -> None:
    """Table 12's token-level speculative-decoding baseline (`mai speculative`), where stored."""
    rows = fetch(store.home, SpeculativeRow, SPECULATIVE, [store.run_ids])
    if rows:
        section.tables.append(Table(
            ["large R run", "large", "small (draft)", "draft tokens", "samples", "acceptance", "speculative s",
             "large alone s", "speed-up", "identical to greedy"],
            [[r["run_id"], r["large_model"], r["small_model"], r["draft_tokens"], r["samples"], num(r["acceptance"]),
              num(r["speculative_s"]), num(r["plain_s"]), num(r["speedup"]), r["identical"]] for r in rows],
            "Speculative decoding (table 12): the small model drafts, the large verifies (batch size 1)"))


def _table_11(section: Section, rows: list[SpeedupRow]) -> None:
    """Estimated and measured seconds per run and estimate, with MAI's speed-up against Full RT on the same samples
    (the paper's table 11 ratio)."""
    if not rows:
        section.notes.append("No run in this report has generations to time.")
        return
    for benchmark in sorted({r["benchmark"] for r in rows}):
        mine: dict[str, SpeedupRow] = {}
        for r in rows:  # a run's first estimate (by name) where it holds several
            if r["benchmark"] == benchmark:
                mine.setdefault(r["run_id"], r)
        shown = sorted(mine.values(), key=lambda r: r["measured_s"] or 0.0)
        labels = [f"{r['setting']} ({short(r['run_id'])})" for r in shown]
        fig = figure(go.Bar(x=labels, y=[r["estimated_s"] for r in shown], name="estimated (equation 27)",
                            customdata=[r["prices"] or "no estimate" for r in shown],
                            hovertemplate="%{x}: %{y:.2f} s<br>%{customdata}<extra></extra>"),
                     go.Bar(x=labels, y=[r["measured_s"] for r in shown], name="measured (this machine)"))
        section.figures.append(layout(fig, f"{benchmark}: time per run", barmode="group",
                                      yaxis={"title": "seconds (log)", "type": "log"}, xaxis={"title": "run"}))
    if not any(r["estimate_name"] for r in rows):
        section.notes.append(f"No estimate stored: {_ESTIMATE_COMMAND}.")
    section.tables.append(Table(
        ["benchmark", "estimate", "prices", "setting", "output tokens", "estimated s", "measured s",
         "est. speed-up vs Full RT", "measured speed-up vs Full RT", "Full RT run", "run"],
        [[r["benchmark"], r["estimate_name"], r["prices"], r["setting"], r["output_tokens"], num(r["estimated_s"]),
          num(r["measured_s"]), _times(r["estimated_speedup_vs_full_rt"]), _times(r["measured_speedup_vs_full_rt"]),
          r["full_rt_run_id"], r["run_id"]] for r in rows], wrap=("prices",)))


def _table_12(section: Section, rows: list[SpeedupRow]) -> None:
    paired = [r for r in rows if r["large_r_run_id"]]
    if not paired:
        section.notes.append("No run has a large-R run over the same samples, dtype, backend and budgets: "
                             "<code>mai run --mode single --single-model large --single-prompt R</code> stores one.")
        return
    section.tables.append(Table(
        ["benchmark", "setting", "estimate", "large R estimate", "est. speed-up vs large R",
         "measured speed-up vs large R", "large R run", "run"],
        [[r["benchmark"], r["setting"], r["estimate_name"], r["large_r_estimate"],
          _times(r["estimated_speedup_vs_large_r"]), _times(r["measured_speedup_vs_large_r"]), r["large_r_run_id"],
          r["run_id"]] for r in paired],
        "Estimates pair by the profile each prices the shared (large) model with, not by name"))


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
