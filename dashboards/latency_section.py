"""The report's latency section (paper tables 1-4, 11, 12): latency profiles, each run's estimated and measured
time with the speed-up against the large model's R run and Full RT, and the token-level speculative-decoding
baseline. Estimates pair by the models they price (speedup.sql), whatever their names."""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import plotly.graph_objects as go

from mai.dashboards.charts import DASH, Section, Table, layout, num, short, subplots
from mai.dashboards.groups import SampleSet
from mai.dashboards.latency_tables import add_tables
from mai.dashboards.rows import LatencyPointRow, SpeculativeRow, SpeedupRow
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import Store
from mai.dashboards.time_tables import (
    Timings,
    load_cell,
    machine_of,
    measured,
    priced_on,
    table_11,
    times,
)
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
        section.figures.append(profiles_figure(profiles))
        measured = [p for p in profiles if p["vision_ms"] is not None]
        if measured:
            section.figures.append(_measured_figure(measured))
    else:
        section.notes.append(f"No latency profile stored: {_PROFILE_COMMAND}.")
    add_tables(section, profiles, _PROFILE_COMMAND)
    every = fetch(store.home, SpeedupRow, load_saved("speedup"))
    timings = Timings.of(store, every)  # reference runs may lie outside the report's selection
    rows = [r for r in every if r["run_id"] in store.run_ids]
    part = section.child("table-11", "Table 11 · Total inference time (s): estimated (equation 27) and measured, "
                                     "MAI vs Full RT")
    hardware = {p["profile_name"]: p["hardware"] for p in profiles}  # profile -> the hardware it describes
    table_11(store, part, rows, timings, hardware)  # the paper's layout first, then each run's time
    _table_11(store, part, rows, timings, hardware)
    table_12 = section.child("table-12", "Table 12 · Speed-up against the large model's R run (and decoding "
                                         "strategies)")
    speculative = fetch(store.home, SpeculativeRow, SPECULATIVE, [store.run_ids])
    table_12_layout(store, table_12, rows, speculative, timings)
    _table_12(store, table_12, rows, timings)
    _speculative(table_12, speculative)
    return section


_PROFILE_COMMAND = ("<code>mai profile MODEL --name NAME</code> measures one on this machine, <code>mai import-profile "
                    "docs/paper_latency_h100.csv --name h100-8b --model Qwen3-VL-8B</code> imports the paper's")
_ESTIMATE_COMMAND = ("<code>mai estimate RUN --small-profile h100-2b --large-profile h100-8b</code> prices a run "
                     "(each run and its large-R baseline)")


def profiles_figure(profiles: list[LatencyPointRow]) -> go.Figure:
    """Per hardware (a row of panels each, own axes: a CPU profile would flatten the H100 lines), TTFT against the
    input length (the mean over image sizes and outputs per length) and decoding speed."""
    machines = sorted({p["hardware"] for p in profiles})
    fig = subplots(rows=len(machines), cols=2, vertical_spacing=min(0.3, 0.5 / len(machines)), subplot_titles=[
        title for machine in machines for title in (f"{machine}: TTFT vs input tokens (tables 3-4)",
                                                    f"{machine}: decoding speed (tokens / s)")])
    for row, machine in enumerate(machines, start=1):
        mine = [p for p in profiles if p["hardware"] == machine]
        names = sorted({p["profile_name"] for p in mine})
        for name in names:
            by_length: dict[int, list[float]] = defaultdict(list)
            models = []
            for p in mine:
                if p["profile_name"] == name and (ttft := p["ttft_ms"]) is not None:
                    by_length[int(p["input_tokens"])].append(float(ttft))
                    models.append(p["model"])
            lengths = sorted(by_length)
            fig.add_trace(go.Scatter(x=lengths, y=[sum(by_length[n]) / len(by_length[n]) for n in lengths],
                                     mode="markers+lines", name=f"{name} ({models[0] if models else ''})"),
                          row=row, col=1)
        speeds = [(n, [speed for p in mine if p["profile_name"] == n and (speed := p["tokens_per_s"])])
                  for n in names]
        fig.add_trace(go.Bar(x=[n for n, s in speeds if s], y=[sum(s) / len(s) for _, s in speeds if s],
                             name=f"{machine}: tokens / s", showlegend=False, marker_color="#457b9d"),
                      row=row, col=2)
        fig.update_xaxes(title_text="input tokens", type="log", row=row, col=1)
        fig.update_yaxes(title_text="TTFT (ms)", row=row, col=1)
    return layout(fig, "Latency profiles, one row of panels per hardware", height=120 + 320 * len(machines))


def _measured_figure(measured: list[LatencyPointRow]) -> go.Figure:
    """Measured profiles, a row of panels per hardware: preprocessing, vision encoder and TTFT per image size,
    decode time per output length."""
    machines = sorted({p["hardware"] for p in measured})
    fig = subplots(rows=len(machines), cols=2, vertical_spacing=min(0.3, 0.5 / len(machines)), subplot_titles=[
        title for machine in machines for title in (f"{machine}: per image resolution (tables 1-2)",
                                                    f"{machine}: decode time per output length")])
    for row, machine in enumerate(machines, start=1):
        for name in sorted({p["profile_name"] for p in measured if p["hardware"] == machine}):
            mine = [p for p in measured if p["profile_name"] == name and p["hardware"] == machine]
            per_resolution = {"preprocess_ms": [p["preprocess_ms"] for p in mine],
                              "vision_ms": [p["vision_ms"] for p in mine], "ttft_ms": [p["ttft_ms"] for p in mine]}
            for column, values in per_resolution.items():
                fig.add_trace(go.Scatter(x=[p["image_resolution"] for p in mine], y=values, mode="markers",
                                         name=f"{name}: {column}"), row=row, col=1)
            fig.add_trace(go.Scatter(x=[p["output_tokens"] for p in mine], y=[p["decode_ms"] for p in mine],
                                     mode="markers", name=f"{name}: decode_ms"), row=row, col=2)
        fig.update_xaxes(title_text="image side (px)", row=row, col=1)
        fig.update_xaxes(title_text="output tokens", row=row, col=2)
    fig.update_yaxes(title_text="ms")
    return layout(fig, "Measured profiles: preprocessing, vision encoder, TTFT, decode (one row per hardware)",
                  height=120 + 320 * len(machines))


SPECULATIVE = """
    SELECT run_id, large_model, small_model, draft_tokens, count(*) AS samples, avg(acceptance_rate) AS acceptance,
           sum(speculative_wall_s) AS speculative_s, sum(plain_wall_s) AS plain_s,
           sum(plain_wall_s) / sum(speculative_wall_s) AS speedup, bool_and(identical_to_greedy) AS identical
    FROM speculative WHERE list_contains(?, run_id) GROUP BY ALL ORDER BY run_id, draft_tokens
"""


def _speculative(section: Section, rows: list[SpeculativeRow]) -> None:
    """Table 12's token-level speculative-decoding baseline (`mai speculative`), where stored."""
    if rows:
        section.tables.append(Table(
            ["large R run", "large", "small (draft)", "draft tokens", "samples", "acceptance", "speculative s",
             "large alone s", "speed-up", "identical to greedy"],
            [[r["run_id"], r["large_model"], r["small_model"], r["draft_tokens"], r["samples"], num(r["acceptance"]),
              num(r["speculative_s"]), num(r["plain_s"]), num(r["speedup"]), r["identical"]] for r in rows],
            "Speculative decoding (table 12): the small model drafts, the large verifies (batch size 1)"))


def _table_11(store: Store, section: Section, rows: list[SpeedupRow], timings: Timings,
              hardware: dict[str, str]) -> None:
    """Every run's time per comparison group: a chart with estimated (equation 27, under the profiles named) and
    measured seconds (this store's wall time, on the machine named) in separate panels with their own axes, and a
    table with the speed-ups against Full RT on the same samples (the paper's table 11 ratio). The measuring
    machines are those of the runs that computed the generations and captures each time adds up."""
    if not rows:
        section.notes.append("No run in this report has generations to time.")
        return
    runs = {r["run_id"]: r for r in store.all_runs}
    for group, mine in _per_group(store, rows).items():
        shown = sorted(mine, key=lambda r: r["measured_s"] or 0.0)
        labels = [f"{store.settings.get(r['run_id'], r['setting'])} ({short(r['run_id'])})" for r in shown]
        machines = sorted({machine_of(runs.get(t))[0] for t in timings.timed_by(r["run_id"] for r in shown)})
        profiles_of = sorted({priced_on(r["prices"], hardware) for r in shown if r["prices"]})
        # a panel only for what is stored (no empty "profiles of none" panel); a run with outputs missing draws no
        # measured bar (its time would be partial)
        panels = [(f"estimated s (equation 27, profiles of {'; '.join(profiles_of)})", "estimated (equation 27)",
                   "#457b9d", [r["estimated_s"] for r in shown], [r["prices"] or "no estimate" for r in shown],
                   "estimated seconds"),
                  (f"measured s ({'; '.join(machines)})", "measured (wall time)", "#e76f51",
                   [None if store.lost(r["run_id"]) else r["measured_s"] for r in shown],
                   [store.lost(r["run_id"]) or timings.note([r["run_id"]]) for r in shown], "measured seconds")]
        panels = [p for p in panels if any(v is not None for v in p[3])]
        if not panels:
            section.tables.append(_runs_table(store, group, mine, timings, hardware))
            continue
        fig = subplots(rows=1, cols=len(panels), horizontal_spacing=0.1, subplot_titles=[p[0] for p in panels])
        for col, (_, name, color, values, hover, axis) in enumerate(panels, start=1):
            fig.add_trace(go.Bar(x=labels, y=values, name=name, marker_color=color, customdata=hover,
                                 hovertemplate="%{x}: %{y:.2f} s<br>%{customdata}<extra></extra>"), row=1, col=col)
            fig.update_yaxes(title_text=axis, row=1, col=col)
        section.figures.append(layout(fig, f"{group.label}: time per run, estimated and measured apart", group.key,
                                      height=460, showlegend=False))
        section.tables.append(_runs_table(store, group, mine, timings, hardware))
    if not any(r["estimate_name"] for r in rows):
        section.notes.append(f"No estimate stored: {_ESTIMATE_COMMAND}.")


def _runs_table(store: Store, group: SampleSet, rows: list[SpeedupRow], timings: Timings,
                hardware: dict[str, str]) -> Table:
    """Every run's time in one comparison group: estimated and measured seconds in separate columns; a cell with
    no number (a measured time that is not one regime, a run with outputs missing, Full RT against itself) is a
    dash whose footnote says why."""
    table = Table(
        ["estimate", "prices (profiles' hardware)", "setting", "output tokens", "estimated s",
         "est. speed-up vs Full RT", "measured s", "measured speed-up vs Full RT", "measured on", "load (1 min)",
         "Full RT run", "run"], [],
        f"{group.label}: every run's time; estimated and measured seconds in separate columns, 'measured on' "
        "names the machines and loads of the runs that computed the run's and its Full RT run's times",
        wrap=("prices (profiles' hardware)", "measured on"), group=group.key, runs=[r["run_id"] for r in rows])
    for r in rows:
        lost = store.lost(r["run_id"])
        gone = f"run {r['run_id']}: {lost}: its tokens and time over the outputs left would be partial" if lost else ""
        cell = measured(r, "full_rt", timings) if r["full_rt_run_id"] else None
        itself = r["full_rt_run_id"] == r["run_id"]
        reference = "Full RT is the reference of the speed-ups: no speed-up against itself"
        estimated = (table.noted(DASH, reference) if itself else _estimated(table, r, "full_rt"))
        if cell is None or itself:
            speedup = table.noted(DASH, reference if itself else "no Full RT run over these samples")
        elif cell.reason:
            speedup = table.noted(DASH, f"no measured speed-up of {r['run_id']} against {r['full_rt_run_id']}: "
                                        f"{cell.reason}")
        else:
            speedup = cell.speedup
        table.rows.append([
            r["estimate_name"], f"{r['prices']} ({priced_on(r['prices'], hardware)})" if r["prices"] else None,
            store.settings.get(r["run_id"], r["setting"]), table.noted(DASH, gone) if gone else r["output_tokens"],
            num(r["estimated_s"]) if r["estimated_s"] is not None else table.noted(
                DASH, f"{r['run_id']}: no estimate stored"), estimated, table.noted(DASH, gone) if gone else num(r["measured_s"]), speedup,
            timings.note(i for i in (r["run_id"], r["full_rt_run_id"]) if i),
            cell.load if cell else load_cell(r["load_start"], r["load_end"], r["load_min"], r["load_max"],
                                             r["load_band"]),
            r["full_rt_run_id"], r["run_id"]])
    return table


def _per_group(store: Store, rows: list[SpeedupRow]) -> dict[SampleSet, list[SpeedupRow]]:
    """The rows per comparison group, one row per run (its first estimate by name where it holds several)."""
    groups: dict[SampleSet, dict[str, SpeedupRow]] = defaultdict(dict)
    for r in rows:
        if r["run_id"] in store.sample_sets:
            groups[store.sample_sets[r["run_id"]]].setdefault(r["run_id"], r)
    return {group: list(mine.values()) for group, mine in sorted(groups.items())}


def _table_12(store: Store, section: Section, rows: list[SpeedupRow], timings: Timings) -> None:
    paired = [r for r in rows if r["large_r_run_id"]]
    if not paired:
        section.notes.append("No run has a large-R run over the same samples, dtype, backend and budgets: "
                             "<code>mai run --mode single --single-model large --single-prompt R</code> stores one.")
        return
    groups: dict[SampleSet, list[SpeedupRow]] = defaultdict(list)
    for r in paired:
        groups[store.sample_sets[r["run_id"]]].append(r)
    for group, mine in sorted(groups.items()):
        table = Table(
            ["setting", "estimate", "large R estimate", "est. speed-up vs large R", "measured speed-up vs large R",
             "measured on", "large R run", "run"], [],
            f"{group.label}: every run against the large model's R run; estimates pair by the profile each prices "
            "the shared (large) model with, not by name; 'measured on' names the machines and loads of the runs "
            "that computed both measured times", group=group.key, wrap=("measured on",),
            runs=sorted({r["run_id"] for r in mine} | {r["large_r_run_id"] or "" for r in mine}))
        for r in mine:
            cell = measured(r, "large_r", timings)
            speedup = (table.noted(DASH, f"no measured speed-up of {r['run_id']} against {r['large_r_run_id']}: "
                                         f"{cell.reason}") if cell.reason else cell.speedup)
            table.rows.append([store.settings.get(r["run_id"], r["setting"]), r["estimate_name"],
                               r["large_r_estimate"], _estimated(table, r, "large_r"), speedup,
                               timings.note([r["run_id"], r["large_r_run_id"] or ""]), r["large_r_run_id"],
                               r["run_id"]])
        section.tables.append(table)


def _estimated(table: Table, row: SpeedupRow, reference: Literal["large_r", "full_rt"]) -> str:
    """The estimated speed-up against large R or Full RT, or a dash whose footnote says why there is none."""
    value = row["estimated_speedup_vs_large_r" if reference == "large_r" else "estimated_speedup_vs_full_rt"]
    if value is not None:
        return times(value)
    other = row["large_r_run_id" if reference == "large_r" else "full_rt_run_id"]
    name = "large R" if reference == "large_r" else "Full RT"
    if not other:
        return table.noted(DASH, f"no {name} run over these samples")
    if not row["estimate_name"]:
        return table.noted(DASH, f"{row['run_id']}: no estimate stored")
    return table.noted(DASH, f"no estimate of {name} run {other} that prices the shared models as "
                             f"{row['estimate_name']} does")
