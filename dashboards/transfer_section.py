"""The report's sparse-reasoning-transfer section: the transfer-layer sweep (paper table 9), the attention the
large model pays to the small model's reasoning per layer (figure 3), per head and layer (figures 4 and 5), and
the most attended reasoning tokens (table 16).

Attention rows are read for the report's runs only: the captures a run's sparse-RT selections came from, and
those the run captured itself (a sweep captures every layer once and later runs reuse it, so a run's rows are the
captures it used, not the ones it wrote). Each capture is grouped by the large model and the model whose
reasoning it read (the paper's 8B + 2B-R against 8B + 8B-R)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go
from mai.dashboards.charts import PALETTE, Section, Table, layout, num, short, subplots
from mai.dashboards.groups import SampleSet
from mai.dashboards.rows import AttentionPairRow, HeadCellRow, SweepRow, TopTokenRow
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import Store
from mai.dashboards.views import FULL_RT, fetch

# the captures the runs used (through their selections) or wrote
RUN_CAPTURES = """
    SELECT a.* EXCLUDE (token_ids), coalesce(rg.model, '?') AS reasoning_model
    FROM attention a LEFT JOIN generations rg ON rg.gen_id = a.reasoning_gen_id
    WHERE a.n_reasoning_tokens > 0 AND (list_contains(?, a.run_id) OR a.capture_id IN (
        SELECT s.capture_id FROM routes r
        JOIN generations g ON g.gen_id = r.gen_rt_large
        JOIN selections s ON s.selection_id = g.upstream_gen_id
        WHERE list_contains(?, r.run_id)))
"""
PER_LAYER = f"""
    SELECT model, reasoning_model, layer, count(*) AS prefills, avg(span_attention) AS attention,
           avg(list_avg(head_tokens_for_80) / n_reasoning_tokens) AS share_for_80,
           avg(n_reasoning_tokens) AS reasoning_tokens
    FROM ({RUN_CAPTURES}) GROUP BY ALL ORDER BY model, reasoning_model, layer
"""
PER_HEAD = f"""
    WITH heads AS (
        SELECT model, reasoning_model, layer, unnest(range(len(head_span_attention))) AS head,
               unnest(head_span_attention) AS attention, unnest(head_tokens_for_80) / n_reasoning_tokens AS share
        FROM ({RUN_CAPTURES})
    )
    SELECT model, reasoning_model, layer, head, avg(attention) AS attention, avg(share) AS share_for_80
    FROM heads GROUP BY ALL ORDER BY model, reasoning_model, layer, head
"""
TOP_TOKENS = f"""
    WITH tokens AS (
        SELECT model, reasoning_model, layer, unnest(token_texts) AS token, unnest(weights) AS weight
        FROM ({RUN_CAPTURES})
    ), per_token AS (
        SELECT model, reasoning_model, layer, token, sum(weight) AS attention FROM tokens GROUP BY ALL
    ), ranked AS (
        SELECT model, reasoning_model, layer, token,
               attention / sum(attention) OVER (PARTITION BY model, reasoning_model, layer) AS share,
               row_number() OVER (PARTITION BY model, reasoning_model, layer ORDER BY attention DESC, token) AS rank
        FROM per_token
    )
    SELECT model || ' + ' || reasoning_model || ' R' AS model, layer, rank, token, share
    FROM ranked WHERE rank <= 10 ORDER BY model, layer, rank
"""
SWEEP_COMMAND = ("<code>mai sweep --layers 0,1,2</code> stores a cascade-mode sweep, "
                 "<code>mai sweep --mode full_rt --layers 0,1,2</code> a Full-RT one")


def transfer(store: Store) -> Section:
    section = Section("layer-sweep", "Sparse reasoning transfer (table 9, figures 3-5, table 16)",
                      "Sparse RT transfers only the reasoning tokens the large model attends to at layer L (those "
                      "covering delta of the attention).")
    _table_9(store, section.child("table-9", "Table 9 · Transfer-layer sweep: score and tokens transferred per "
                                              "layer, cascade mode and Full-RT mode as separate lines"))
    runs = store.run_ids
    per_layer = fetch(store.home, AttentionPairRow, PER_LAYER, [runs, runs])
    heads = fetch(store.home, HeadCellRow, PER_HEAD, [runs, runs]) if per_layer else []
    _figure_3(section.child("figure-3", "Figure 3 · Attention on the reasoning and its sparsity per layer, mean "
                                        "over heads"), per_layer)
    _heatmaps(section.child("figure-4", "Figure 4 · Head-wise attention on the reasoning across layers"), heads,
              lambda h: h["attention"], "attention on reasoning")
    _heatmaps(section.child("figure-5", "Figure 5 · Head-wise sparsity within the reasoning across layers"), heads,
              lambda h: h["share_for_80"], "share of tokens for 80 %")
    top = fetch(store.home, TopTokenRow, TOP_TOKENS, [runs, runs]) if per_layer else []
    _table_16(section.child("table-16", "Table 16 · Most attended reasoning tokens per layer"), top, per_layer)
    return section


def _sweep_name(row: SweepRow) -> str:
    return "MAI sparse RT" if row["mode"] == "cascade" else f"{FULL_RT} sparse"


@dataclass(frozen=True)
class _SparseRun:
    line: str   # the trace it is drawn on: its mode and delta
    layer: int
    row: SweepRow


@dataclass(frozen=True, order=True)
class _SweepKey:
    """A sweep's comparison group: its samples and its model pair."""

    group: SampleSet
    small_model: str
    large_model: str


def _table_9(store: Store, section: Section) -> None:
    """Per sweep (sample set and model pair): the paper's grid, a column per transfer layer and one for full
    transfer ("Full"), a score row and a tokens-transferred row per mode and delta; the full-transfer and large-S
    baselines are runs of the sweep's own pair over its own samples, without S2."""
    rows = fetch(store.home, SweepRow, load_saved("transfer_layer_sweep"))
    runs = {r["run_id"]: r for r in store.all_runs}
    sweeps: dict[_SweepKey, list[_SparseRun]] = defaultdict(list)
    for r in rows:
        run = runs.get(r["run_id"])
        if (r["run_id"] in store.run_ids and r["setting"] == "sparse RT" and run is not None
                and (layer := r["layer"]) is not None and (delta := r["delta"]) is not None):
            key = _SweepKey(store.sample_sets[r["run_id"]], run["small_model"] or "", run["large_model"] or "")
            sweeps[key].append(_SparseRun(f"{_sweep_name(r)}, delta {delta:g}", layer, r))
    if not sweeps:
        section.notes.append(f"No sparse-RT run in this report: {SWEEP_COMMAND}.")
        return
    for key, sparse in sorted(sweeps.items()):
        def same(row: SweepRow, key: _SweepKey = key) -> bool:
            run = runs[row["run_id"]]
            return (store.sample_sets.get(row["run_id"]) == key.group and not run["s2"]
                    and run["large_model"] == key.large_model
                    and (row["setting"] == "large S" or run["small_model"] == key.small_model))
        baselines: dict[tuple[str, str], SweepRow] = {(b["setting"], str(b["mode"])): b for b in rows
                                                      if b["setting"] != "sparse RT" and same(b)}
        _sweep_grid(section, key, sparse, baselines)


def _sweep_grid(section: Section, key: _SweepKey, sparse: list[_SparseRun],
                baselines: dict[tuple[str, str], SweepRow]) -> None:
    title = f"{key.group.label}: {key.large_model} + {key.small_model} R"
    layers = sorted({s.layer for s in sparse})
    table = Table(["line", "quantity", *(f"L{layer}" for layer in layers), "Full"], [],
                  f"{title}. Full: the same mode with full transfer (every reasoning token). Large S: " + (
                      f"{100 * baselines[('large S', 'single')]['value']:.1f} % "
                      f"({baselines[('large S', 'single')]['run_id']})" if ("large S", "single") in baselines
                      else "not stored on these samples"), group=key.group.key)
    fig = subplots(rows=1, cols=2, subplot_titles=("score by transfer layer", "tokens transferred"),
                   horizontal_spacing=0.12)
    for index, line in enumerate(sorted({s.line for s in sparse})):
        colour = PALETTE[index % len(PALETTE)]
        points = sorted((s for s in sparse if s.line == line), key=lambda s: s.layer)
        by_layer = {s.layer: s.row for s in points}
        full = baselines.get(("full RT", points[0].row["mode"]))
        table.runs.extend(s.row["run_id"] for s in points)
        if full is not None:
            table.runs.append(full["run_id"])
        table.rows.append([line, "score %", *(f"{100 * by_layer[layer]['value']:.1f}" if layer in by_layer
                                               else None for layer in layers),
                           f"{100 * full['value']:.1f}" if full else "not stored"])
        table.rows.append([line, "tokens transferred", *(num(by_layer[layer]["mean_transferred_tokens"], 1)
                                                         if layer in by_layer else None for layer in layers),
                           num(full["mean_reasoning_tokens"], 1) if full else "not stored"])
        fig.add_trace(go.Scatter(x=[s.layer for s in points], y=[100 * s.row["value"] for s in points],
                                 mode="lines+markers", name=line, legendgroup=line, line={"color": colour},
                                 marker={"color": colour}), row=1, col=1)
        fig.add_trace(go.Scatter(x=[s.layer for s in points], y=[s.row["mean_transferred_tokens"] for s in points],
                                 mode="lines+markers", name=f"{line}: transferred", legendgroup=line,
                                 showlegend=False, line={"color": colour}, marker={"color": colour}), row=1, col=2)
        if full is not None:
            fig.add_trace(go.Scatter(x=[min(layers), max(layers)], y=[100 * full["value"]] * 2, mode="lines",
                                     line={"dash": "dash", "color": colour}, legendgroup=line,
                                     name=f"{_baseline_name(full)} ({short(full['run_id'])})"), row=1, col=1)
    large_s = baselines.get(("large S", "single"))
    if large_s is not None:
        fig.add_trace(go.Scatter(x=[min(layers), max(layers)], y=[100 * large_s["value"]] * 2, mode="lines",
                                 line={"dash": "dot", "color": "#6c757d"},
                                 name=f"large S ({short(large_s['run_id'])})"), row=1, col=1)
    fig.update_xaxes(title_text="transfer layer (0-based)", dtick=1)
    fig.update_yaxes(title_text="score (%)", row=1, col=1)
    fig.update_yaxes(title_text="mean tokens transferred", row=1, col=2)
    section.figures.append(layout(fig, f"Transfer-layer sweep: {title}"))
    section.tables.append(table)


def _baseline_name(row: SweepRow) -> str:
    """A flat line of the sweep: the large model's S answers, or full transfer in either mode."""
    if row["setting"] == "large S":
        return "large S"
    return "MAI, full transfer" if row["mode"] == "cascade" else FULL_RT


def _pair(row: AttentionPairRow | HeadCellRow) -> str:
    return f"{row['model']} + {row['reasoning_model']} R"


def _figure_3(section: Section, rows: list[AttentionPairRow]) -> None:
    if not rows:
        section.notes.append(f"No attention captured for this report's runs: sparse RT captures it ({SWEEP_COMMAND}).")
        return
    fig = subplots(rows=1, cols=2, horizontal_spacing=0.12,
                   subplot_titles=("(a) attention weight of all reasoning tokens",
                                   "(b) share of reasoning tokens holding 80 % of it"))
    for pair in sorted({_pair(r) for r in rows}):
        mine = [r for r in rows if _pair(r) == pair]
        fig.add_trace(go.Scatter(x=[r["layer"] for r in mine], y=[r["attention"] for r in mine],
                                 mode="lines+markers", name=pair, legendgroup=pair), row=1, col=1)
        fig.add_trace(go.Scatter(x=[r["layer"] for r in mine], y=[r["share_for_80"] for r in mine],
                                 mode="lines+markers", name=pair, legendgroup=pair, showlegend=False), row=1, col=2)
    if len({r["reasoning_model"] for r in rows}) == 1:
        section.notes.append("The paper sets the large model reading the small model's reasoning against it reading "
                             "its own (8B + 2B-R vs 8B + 8B-R); this report holds one reasoning model. A sweep of a "
                             "pair whose small model is the large one stores the other: <code>mai sweep "
                             "--small-model L --large-model L --layers 0,1,2</code>.")
    fig.update_xaxes(title_text="layer (0-based)", dtick=1)
    fig.update_yaxes(title_text="attention on the reasoning (mean over heads)", row=1, col=1)
    fig.update_yaxes(title_text="share of reasoning tokens", row=1, col=2)
    section.figures.append(layout(fig, "Attention on the small model's reasoning, per layer"))
    section.tables.append(Table(["large + reasoning", "layer", "prefills", "reasoning tokens", "attention",
                                 "share for 80 %"],
                                [[_pair(r), r["layer"], r["prefills"], num(r["reasoning_tokens"], 1),
                                  num(r["attention"], 3), num(r["share_for_80"], 3)] for r in rows]))


def _heatmaps(section: Section, heads: list[HeadCellRow], value: Callable[[HeadCellRow], float], label: str
              ) -> None:
    """One head x layer heatmap per (large model, reasoning model): box plots cannot tell heads apart."""
    if not heads:
        section.notes.append(f"No attention captured for this report's runs ({SWEEP_COMMAND}).")
        return
    pairs = sorted({_pair(h) for h in heads})
    fig = subplots(rows=1, cols=len(pairs), subplot_titles=pairs, horizontal_spacing=0.1)
    for index, pair in enumerate(pairs, start=1):
        cells = {(h["head"], h["layer"]): float(value(h)) for h in heads if _pair(h) == pair}
        layers = sorted({layer for _, layer in cells})
        head_ids = sorted({head for head, _ in cells})
        z = [[cells.get((head, layer), math.nan) for layer in layers] for head in head_ids]
        fig.add_trace(go.Heatmap(x=layers, y=head_ids, z=z, coloraxis="coloraxis", name=pair,
                                 hovertemplate="layer %{x}, head %{y}: %{z:.3f}<extra></extra>"), row=1, col=index)
    fig.update_xaxes(title_text="layer (0-based)", dtick=1)
    fig.update_yaxes(title_text="head", dtick=1, row=1, col=1)
    section.figures.append(layout(fig, f"{label}, per head and layer", coloraxis={"colorbar": {"title": label}}))


def _table_16(section: Section, top: list[TopTokenRow], per_layer: list[AttentionPairRow]) -> None:
    """As the paper lays it out: a row per layer and model pair, its share of tokens for 80 % and the ranked
    tokens with their share of the layer's attention on the reasoning."""
    if not top:
        section.notes.append(f"No attention captured for this report's runs ({SWEEP_COMMAND}).")
        return
    sparsity = {(_pair(r), r["layer"]): r for r in per_layer}
    ranked: dict[tuple[int, str], list[TopTokenRow]] = defaultdict(list)
    for r in top:
        ranked[(r["layer"], r["model"])].append(r)
    ranks = max(len(v) for v in ranked.values())
    table = Table(["layer", "large + reasoning", "N-tok (80 %)", *(f"#{i}" for i in range(1, ranks + 1))], [],
                  wrap=("large + reasoning",))
    for (layer, pair), tokens in sorted(ranked.items()):
        own = sparsity.get((pair, layer))
        share = (f"{100 * own['share_for_80']:.1f} % ({own['reasoning_tokens'] * own['share_for_80']:.0f})"
                 if own else None)
        table.rows.append([f"L{layer}", pair, share, *(_token(t) for t in sorted(tokens, key=lambda t: t["rank"]))])
    section.tables.append(table)


def _token(row: TopTokenRow) -> str:
    """A ranked token and its share; blank tokens (spaces, newlines) as their repr."""
    return f"{row['token'].strip() or repr(row['token'])} {100 * row['share']:.1f}%"
