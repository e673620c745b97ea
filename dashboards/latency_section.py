"""The report's latency section (paper tables 1-4, 11, 12): latency profiles, each run's estimated and measured
time with the speed-up against the large model's R run, and the token-level speculative-decoding baseline."""

from __future__ import annotations

from collections import defaultdict

import plotly.graph_objects as go
from mai.dashboards.charts import Section, Table, figure, layout, num, short, subplots
from mai.dashboards.rows import LatencyPointRow, SpeculativeRow, SpeedupRow
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import Store
from mai.dashboards.views import fetch

PROFILES = ("SELECT profile_name, model, input_tokens, output_tokens, image_resolution, ttft_ms, tokens_per_s, "
            "preprocess_ms, vision_ms, decode_ms FROM latency_profiles "
            "ORDER BY profile_name, input_tokens, image_resolution")


def latency(store: Store) -> Section:
    section = Section("latency", "Latency: profiles, estimated and measured time, speed-up (paper tables 1-4, "
                      "11, 12)",
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
        section.notes.append("No latency profile stored: `mai profile MODEL --name NAME` or `mai import-profile`.")
    _speedup(store, section)
    _speculative(store, section)
    return section


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


def _speedup(store: Store, section: Section) -> None:
    rows = [r for r in fetch(store.home, SpeedupRow, load_saved("speedup")) if r["run_id"] in store.run_ids]
    if not rows:
        return
    for benchmark, name in sorted({(r["benchmark"], r["estimate_name"] or "") for r in rows}):
        mine = [r for r in rows if r["benchmark"] == benchmark and (r["estimate_name"] or "") == name]
        fig = figure()
        labels = [f"{r['setting']} ({short(r['run_id'])})" for r in mine]
        if name:
            fig.add_trace(go.Bar(x=labels, y=[r["estimated_s"] for r in mine], name=f"estimated ({name})"))
        fig.add_trace(go.Bar(x=labels, y=[r["measured_s"] for r in mine], name="measured"))
        title = f"{benchmark}: time per run" + (f" (estimate {name})" if name else " (no estimate stored)")
        section.figures.append(layout(fig, title, barmode="group", yaxis={"title": "seconds (log)", "type": "log"}))
    section.tables.append(Table(
        ["benchmark", "estimate", "setting", "output tokens", "estimated s", "measured s", "est. speed-up vs large R",
         "measured speed-up vs large R", "run"],
        [[r["benchmark"], r["estimate_name"], r["setting"], r["output_tokens"], num(r["estimated_s"]),
          num(r["measured_s"]), num(r["estimated_speedup_vs_large_r"]), num(r["measured_speedup_vs_large_r"]),
          r["run_id"]] for r in rows]))

