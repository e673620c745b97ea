"""The report's sections over results computed elsewhere in this folder: the routing-policy lab
(`mai.dashboards.policies`) and run vs run (`mai.dashboards.compare`)."""

from __future__ import annotations

import html
from dataclasses import dataclass

import plotly.graph_objects as go

from mai import cascade
from mai.dashboards.charts import (
    HEIGHT,
    MARGIN,
    Cell,
    Section,
    Table,
    axis_range,
    figure,
    layout,
    mark,
    num,
    place_labels,
    shared_labels,
    short,
)
from mai.dashboards.compare import compare_runs
from mai.dashboards.frontier import CostAxis
from mai.dashboards.groups import group_caption, interval_cell
from mai.dashboards.policies import BUDGET, ORACLE, LabRecord, PolicyRecord, policy_labs
from mai.dashboards.rounding import fixed
from mai.dashboards.sections import Store
from mai.errors import ConfigError

# the outputs the lab's introduction names, as the stage table labels them
_LAB_OUTPUTS = ", ".join(stage.label for stage in (
    cascade.S_SMALL, cascade.S_LARGE, cascade.R_SMALL, cascade.S2_SMALL, *cascade.single_stages("large", "R", False),
    cascade.RT_LARGE))


def policy_lab(store: Store) -> Section:
    section = Section("policy-lab", "Routing-policy lab (no model runs; beyond the paper)",
                      f"Every stored per-sample output of a model pair on a split ({_LAB_OUTPUTS}) combined offline "
                      "into routing policies, each scored and priced (equation-27 seconds under the pair's latency "
                      "profiles when an estimate is stored, else output tokens). The oracle takes per sample the "
                      "cheapest stored answer that is right. The line is the Pareto frontier; APGR-style area: the "
                      f"best performance gap recovered between {cascade.S_SMALL.label} and {cascade.S_LARGE.label} "
                      "reachable within a budget, averaged over the budget range, which is fixed by definition: from "
                      f"the cost of {BUDGET[0]} to that of {BUDGET[1]} (shaded), so adding or dropping a policy "
                      "does not move its ends.")
    try:
        labs = [lab for lab in policy_labs(store.home)
                if {r["run_id"] for r in lab["runs"]} & set(store.run_ids)]
    except ConfigError as error:
        labs = []
        section.notes.append(html.escape(str(error)))
    for lab in labs:
        _one_lab(section, lab, store)
    return section


@dataclass(frozen=True)
class _Plotted:
    """An available policy (it answered every sample: its score and costs are set) as the chart shows it."""

    record: PolicyRecord
    cost: float
    score: float

    @classmethod
    def of(cls, record: PolicyRecord, axis: CostAxis) -> _Plotted:
        cost = record["seconds"] if axis == "seconds" else record["mean_output_tokens"]
        return cls(record, cost or 0.0, record["mean_score"] or 0.0)

    @property
    def name(self) -> str:
        return self.record["name"]


def _one_lab(section: Section, lab: LabRecord, store: Store) -> None:
    axis = lab["cost_axis"]
    usable = [_Plotted.of(p, axis) for p in lab["policies"] if p["available"]]
    partial = [_Plotted.of(p, axis) for p in lab["policies"] if p["n"] and not p["available"]]
    section.figures.append(_lab_figure(lab, usable))
    summary = lab["summary"]
    profiles = ", ".join(f"{role} {name}" for role, name in (lab["latency_profiles"] or {}).items()) or "none"
    runs = [r for r in store.all_runs if r["run_id"] in {ref["run_id"] for ref in lab["runs"]}]
    sample_set = next((store.sample_sets[r["run_id"]] for r in runs if r["run_id"] in store.sample_sets), None)
    words = group_caption(sample_set, runs) if sample_set else f"{lab['benchmark']}, {lab['samples']} samples"
    caption = (f"{words}: scorer profile {lab['scorer_profile']}; latency profiles: {profiles}; score: mean %, 95 % "
               f"interval, n (every policy on the samples where all its inputs are stored, {lab['samples']} here). "
               + (f"APGR-style area: {fixed(summary['apgr'], 3)} with every policy, {num(summary['apgr_baselines'], 3)} "
                  f"with single-output baselines only; oracle PGR {num(summary['oracle_pgr'])}."
                  if summary["apgr"] is not None else ""))
    table = Table(
        ["policy", "score %", lab["policies"][0]["metric"] or "metric", "PGR", "tokens / sample", "small calls",
         "large calls", "est. s", "Pareto", "routes", "what it does"],
        [_policy_row(u) for u in usable], caption, wrap=("routes", "what it does"), scored=("score %",),
        group=lab["group_key"], runs=[r["run_id"] for r in lab["runs"]])
    for u in partial:  # on fewer samples: in the table with its n and a note, never on the chart
        table.footnotes.append(f"{u.name}: on the {u.record['n']} of {lab['samples']} samples where its inputs are "
                               "stored; not drawn (the chart sets policies on the same samples side by side).")
        row = _policy_row(u)
        row[0] = f"{u.name}{mark(len(table.footnotes))}"
        table.rows.append(row)
    section.tables.append(table)
    for p in lab["policies"]:
        if not p["available"]:
            section.notes.append(f"{html.escape(p['name'])}: outputs not stored for {p['missing_samples']} samples "
                                 f"({', '.join(p['missing_outputs'])}); store them with "
                                 + " and ".join(f"<code>{html.escape(c)}</code>" for c in p["commands"]))


def _policy_row(plotted: _Plotted) -> list[Cell]:
    p = plotted.record
    interval = p["score_interval"]
    score = (interval_cell(plotted.score, (interval[0], interval[1]), p["n"]) if interval
             else fixed(100 * plotted.score, 1))
    return [p["name"], score, num(p["metric_value"]), num(p["pgr"]),
            num(p["mean_output_tokens"], 1), p["small_calls"], p["large_calls"], num(p["seconds"]),
            "yes" if p["pareto"] else "", " ".join(f"{k}={v}" for k, v in p["routes"].items()), p["description"]]


def _lab_figure(lab: LabRecord, usable: list[_Plotted]) -> go.Figure:
    """Score against cost: every policy, the Pareto frontier, the oracle."""
    unit = "estimated seconds" if lab["cost_axis"] == "seconds" else "mean output tokens per sample"
    fig = figure()
    plain = [u for u in usable if u.name != ORACLE]
    costs = [u.cost for u in usable]
    spans = [100 * v for u in usable for v in (u.record["score_interval"] or [u.score, u.score])]
    x_range, y_range = axis_range(costs or [0.0], False), axis_range(spans or [0.0], False)
    y_range = (max(0.0, y_range[0]), min(100.0, y_range[1])) if y_range[1] - y_range[0] < 100 else (0.0, 100.0)
    xs, ys = [u.cost for u in plain], [100 * u.score for u in plain]
    placed = place_labels(xs, ys, shared_labels(xs, ys, [u.name for u in plain]), x_range, y_range, False)
    fig.add_trace(go.Scatter(x=[u.cost for u in plain], y=[100 * u.score for u in plain], mode="markers+text",
                             textposition=[p for _, p in placed], hovertext=[u.name for u in plain],
                             text=[t for t, _ in placed], cliponaxis=False, error_y=_interval_bars(plain),
                             name="policies (95 % interval)", marker={"size": 10, "color": "#457b9d"}))
    frontier = [u for name in lab["summary"]["frontier"] for u in plain if u.name == name]
    if frontier:  # the legend lists only what is drawn
        fig.add_trace(go.Scatter(x=[u.cost for u in frontier], y=[100 * u.score for u in frontier],
                                 mode="lines", line={"shape": "hv", "color": "#e76f51"}, name="Pareto frontier"))
    for u in usable:
        if u.name == ORACLE:
            fig.add_trace(go.Scatter(x=[u.cost], y=[100 * u.score], mode="markers", name="oracle",
                                     marker={"symbol": "star", "size": 16, "color": "#2a9d8f"}))
    span = lab["summary"]["budget_range"]
    if span:
        fig.add_vrect(x0=span[0], x1=span[1], fillcolor="#e9c46a", opacity=0.12, line_width=0)
    title = f"{lab['group']}: {lab['small_model']} + {lab['large_model']} ({lab['samples']} samples)"
    score_title = "mean score (%)" + (f", axis from {fixed(y_range[0], 0)}" if y_range[0] > 0 else "")
    return layout(fig, title, lab["group_key"], height=HEIGHT, margin=MARGIN,
                  xaxis={"title": unit, "range": list(x_range)}, yaxis={"title": score_title, "range": list(y_range)},
                  legend={"orientation": "h", "y": -0.25})


def _interval_bars(points: list[_Plotted]) -> dict[str, object]:
    """Error bars of each point's 95 % interval (percent), zero where a policy has none."""
    intervals = [p.record["score_interval"] or [p.score, p.score] for p in points]
    return {"type": "data", "symmetric": False,
            "array": [100 * (high - p.score) for p, (_, high) in zip(points, intervals)],
            "arrayminus": [100 * (p.score - low) for p, (low, _) in zip(points, intervals)]}


# --- run vs run ----------------------------------------------------------------------------------------------


def comparison(store: Store, run_a: str, run_b: str) -> Section:
    result = compare_runs(store.home, run_a, run_b)
    a, b = result["run_a"], result["run_b"]
    section = Section("compare", f"Run vs run: {a['label']} ({short(run_a)}) -> {b['label']} ({short(run_b)})",
                      f"Paired over {result['paired']} shared samples (scorer profile {result['scorer_profile']}): "
                      "B - A per subset with the bootstrap 95 % interval, samples B gets right that A gets wrong "
                      "(better) and the reverse (worse), and the two-sided exact McNemar (or sign) test.")
    rows = result["comparisons"]
    fig = figure(go.Bar(x=[r["subset"] for r in rows], y=[100 * r["difference"] for r in rows],
                           error_y={"type": "data", "symmetric": False,
                                    "array": [100 * (r["ci_high"] - r["difference"]) for r in rows],
                                    "arrayminus": [100 * (r["difference"] - r["ci_low"]) for r in rows]},
                           text=[f"p={r['p_value']:.3g}" for r in rows], textposition="outside",
                           marker_color=["#2a9d8f" if r["difference"] >= 0 else "#e76f51" for r in rows]))
    section.figures.append(layout(fig, "Difference B - A (points) with the 95 % bootstrap interval",
                                  yaxis={"title": "points"}))
    section.tables.append(Table(["subset", "n", "A %", "B %", "B - A", "95 % CI", "better", "worse", "p", "test"],
                                [[r["subset"], r["n"], fixed(100 * r['mean_a'], 1), fixed(100 * r['mean_b'], 1),
                                  fixed(100 * r['difference'], 1, sign=True),
                                  (f"[{fixed(100 * r['ci_low'], 1, sign=True)}, "
                                   f"{fixed(100 * r['ci_high'], 1, sign=True)}]"), r["better"], r["worse"],
                                  f"{r['p_value']:.3g}", r["test"]] for r in rows]))
    cost = result["cost"]
    section.notes.append("; ".join([(f"Output tokens on the paired samples: A {cost['output_tokens_a']}, B "
                                    f"{cost['output_tokens_b']} ({cost['output_tokens_difference']:+d})")]
                                   + [f"estimated ({html.escape(e['prices'])}): A {fixed(e['seconds_a'], 2)} s, "
                                      f"B {fixed(e['seconds_b'], 2)} s" for e in cost["estimates"]]))
    section.tables.append(Table(["run", "setting", "provenance"], [[a["run_id"], a["label"], a["provenance"]],
                                                                   [b["run_id"], b["label"], b["provenance"]]],
                                "Provenance", wrap=("provenance",)))
    section.tables.append(Table(["sample", "category", "score A", "score B", "route A", "route B"],
                                [[c["sample_id"], c["category"], c["score_a"], c["score_b"], c["route_a"],
                                  c["route_b"]] for c in result["changed"]],
                                f"Samples whose score changed ({len(result['changed'])})"))
    return section
