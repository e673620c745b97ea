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
from mai.dashboards.groups import SAMPLE_IDS, SampleSet, Scored, group_caption, score_cell
from mai.dashboards.rounding import fixed
from mai.dashboards.rows import (
    AttentionPairRow,
    CaptureGroupRow,
    ExampleSampleRow,
    ExampleWeightsRow,
    HeadCellRow,
    SweepRow,
)
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import Store
from mai.dashboards.views import FULL_RT, fetch
from mai.paired import mean_interval
from mai.storage.rows import RunRow
from mai.transfer import tokens_to_reach

# the captures the runs used (through their selections) or wrote, each with the comparison group (sample set) of
# the report's run that used or wrote it: a capture two groups share counts in both, once each
RUN_CAPTURES = f"""
    WITH users AS (
        SELECT run_id AS user_run, capture_id FROM attention WHERE list_contains(?, run_id)
        UNION
        SELECT r.run_id, s.capture_id FROM routes r
        JOIN generations g ON g.gen_id = r.gen_rt_large
        JOIN selections s ON s.selection_id = g.upstream_gen_id
        WHERE list_contains(?, r.run_id)
    ), capture_groups AS (
        -- group_run: one report run of the sample set, the same for all its captures (the group, split included,
        -- is that run's: mai.dashboards.groups)
        SELECT DISTINCT u.capture_id, ru.benchmark, ru.dataset_fingerprint, ss.sample_ids, ss.n AS group_n,
               min(u.user_run) OVER (PARTITION BY ru.benchmark, ru.dataset_fingerprint, ss.sample_ids) AS group_run
        FROM users u JOIN runs ru ON ru.run_id = u.user_run JOIN ({SAMPLE_IDS}) ss ON ss.run_id = u.user_run
    )
    SELECT cg.benchmark, cg.dataset_fingerprint, cg.sample_ids, cg.group_n, cg.group_run, a.* EXCLUDE (token_ids),
           coalesce(rg.model, '?') AS reasoning_model
    FROM attention a JOIN capture_groups cg USING (capture_id)
    LEFT JOIN generations rg ON rg.gen_id = a.reasoning_gen_id
    WHERE a.n_reasoning_tokens > 0
"""
GROUP_COLUMNS = "benchmark, dataset_fingerprint, sample_ids, group_n, group_run"
PER_LAYER = f"""
    SELECT {GROUP_COLUMNS}, model, reasoning_model, layer, count(*) AS prefills, avg(span_attention) AS attention,
           avg(list_avg(head_tokens_for_80) / n_reasoning_tokens) AS share_for_80,
           avg(n_reasoning_tokens) AS reasoning_tokens
    FROM ({RUN_CAPTURES}) GROUP BY ALL ORDER BY {GROUP_COLUMNS}, model, reasoning_model, layer
"""
PER_HEAD = f"""
    WITH heads AS (
        SELECT {GROUP_COLUMNS}, model, reasoning_model, layer, unnest(range(len(head_span_attention))) AS head,
               unnest(head_span_attention) AS attention, unnest(head_tokens_for_80) / n_reasoning_tokens AS share
        FROM ({RUN_CAPTURES})
    )
    SELECT {GROUP_COLUMNS}, model, reasoning_model, layer, head, avg(attention) AS attention,
           avg(share) AS share_for_80
    FROM heads GROUP BY ALL ORDER BY {GROUP_COLUMNS}, model, reasoning_model, layer, head
"""
# table 16's example: per comparison group and pair, the first sample (by id) captured at every layer the pair has
# there, as the paper shows one sample's reasoning (sample ids are positions in a dataset: never across groups)
EXAMPLE_SAMPLE = f"""
    WITH captured AS (SELECT {GROUP_COLUMNS}, model || ' + ' || reasoning_model || ' R' AS pair, sample_id, layer
                      FROM ({RUN_CAPTURES})),
         layers AS (SELECT {GROUP_COLUMNS}, pair, count(DISTINCT layer) AS n FROM captured GROUP BY ALL)
    SELECT {GROUP_COLUMNS}, pair, min(sample_id) AS sample_id FROM (
        SELECT {GROUP_COLUMNS}, pair, sample_id, count(DISTINCT layer) AS n FROM captured GROUP BY ALL) c
    JOIN layers l USING ({GROUP_COLUMNS}, pair, n) GROUP BY ALL ORDER BY {GROUP_COLUMNS}, pair
"""
EXAMPLE_WEIGHTS = f"""
    SELECT {GROUP_COLUMNS}, model || ' + ' || reasoning_model || ' R' AS pair, layer, sample_id,
           any_value(weights) AS weights, any_value(token_texts) AS token_texts
    FROM ({RUN_CAPTURES}) WHERE list_contains(?, sample_id) GROUP BY ALL ORDER BY pair, layer
"""
TOP_RANKS = 15  # the paper's table 16 lists the 1st to the 15th token
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
    sets = store.sample_sets
    _figure_3(section.child("figure-3", "Figure 3 · Attention on the reasoning and its sparsity per layer, mean "
                                        "over heads"), per_layer, sets)
    _heatmaps(section.child("figure-4", "Figure 4 · Head-wise attention on the reasoning across layers"), heads,
              lambda h: h["attention"], "attention on reasoning", sets)
    _heatmaps(section.child("figure-5", "Figure 5 · Head-wise sparsity within the reasoning across layers"), heads,
              lambda h: h["share_for_80"], "share of tokens for 80 %", sets)
    examples = fetch(store.home, ExampleSampleRow, EXAMPLE_SAMPLE, [runs, runs]) if per_layer else []
    weights = fetch(store.home, ExampleWeightsRow, EXAMPLE_WEIGHTS,
                    [runs, runs, [e["sample_id"] for e in examples]]) if examples else []
    chosen = {(_group_of(e, sets), e["pair"], e["sample_id"]) for e in examples}
    _table_16(section.child("table-16", "Table 16 · Most attended reasoning tokens per layer"),
              [w for w in weights if (_group_of(w, sets), w["pair"], w["sample_id"]) in chosen], sets)
    return section


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
    # each run's row of its default scorer profile (the saved query has one per profile), the one store.scores holds
    rows = [r for r in fetch(store.home, SweepRow, load_saved("transfer_layer_sweep"))
            if store.headline.get(r["run_id"]) == (r["metric"], r["value"])]
    runs = {r["run_id"]: r for r in store.all_runs}
    sweeps: dict[_SweepKey, list[_SparseRun]] = defaultdict(list)
    for r in rows:
        run = runs.get(r["run_id"])
        if (r["run_id"] in store.run_ids and r["setting"] == "sparse RT" and run is not None
                and (layer := r["layer"]) is not None and (delta := r["delta"]) is not None):
            key = _SweepKey(store.sample_sets[r["run_id"]], run["small_model"] or "", run["large_model"] or "")
            name = "MAI sparse RT" if r["mode"] == "cascade" else f"{FULL_RT} sparse"
            sweeps[key].append(_SparseRun(f"{name}, delta {delta:g}", layer, r))
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
        _sweep_grid(section, key, sparse, baselines, store.scores, [runs[s.row["run_id"]] for s in sparse])


def _scored(row: SweepRow, scores: dict[str, dict[str, float]]) -> Scored:
    return Scored(row["run_id"], row["metric"], row["value"], scores.get(row["run_id"], {}))


def _bounds(scored: Scored) -> tuple[float, float]:
    """The score's 95 % interval in % (the value itself where the headline is no mean over samples: F1)."""
    values = list(scored.scores.values())
    if not values or abs(sum(values) / len(values) - scored.value) > 1e-9:
        return 100 * scored.value, 100 * scored.value
    low, high = mean_interval(values)
    return 100 * low, 100 * high


def _sweep_grid(section: Section, key: _SweepKey, sparse: list[_SparseRun],
                baselines: dict[tuple[str, str], SweepRow], scores: dict[str, dict[str, float]],
                sweep_runs: list[RunRow]) -> None:
    """`scores`: per run, its per-sample scores (cells with interval and n, error bars); `sweep_runs`: the sparse
    runs (for the caption)."""
    def score(row: SweepRow) -> str:
        return score_cell(_scored(row, scores))

    title = f"{key.group.label}: {key.large_model} + {key.small_model} R"
    layers = sorted({s.layer for s in sparse})
    large_s = baselines.get(("large S", "single"))
    values = ["large S", *(f"L{layer}" for layer in layers), "Full"]
    table = Table(["line", "quantity", *values], [],
                  f"{group_caption(key.group, sweep_runs)}. Large S: the large model's own short answer; Full: the "
                  "same mode with full transfer (every stored token of the small model's reasoning, without the "
                  "end-of-sequence token). Scores: %, 95 % interval, n.", group=key.group.key, scored=tuple(values))
    if large_s is not None:
        table.runs.append(large_s["run_id"])
    large_s_score = score(large_s) if large_s else "not stored on these samples"
    fig = subplots(rows=1, cols=2, subplot_titles=("score by transfer layer", "tokens transferred"),
                   horizontal_spacing=0.12)
    # one position per measured layer, labelled by its index: a numeric axis would draw the line through layers
    # that were not measured (L1 to L3 through L2)
    at = {layer: index for index, layer in enumerate(layers)}
    edges = [-0.5, len(layers) - 0.5]
    points_y: list[float] = []
    flat: list[tuple[str, float, dict[str, str], str | None]] = []  # the flat lines: name, score, style, group
    for index, line in enumerate(sorted({s.line for s in sparse})):
        colour = PALETTE[index % len(PALETTE)]
        points = sorted((s for s in sparse if s.line == line), key=lambda s: s.layer)
        by_layer = {s.layer: s.row for s in points}
        full = baselines.get(("full RT", points[0].row["mode"]))
        table.runs.extend(s.row["run_id"] for s in points)
        if full is not None:
            table.runs.append(full["run_id"])
        table.rows.append([line, f"{points[0].row['metric']} %", large_s_score,
                           *(score(by_layer[layer]) if layer in by_layer else None for layer in layers),
                           score(full) if full else "not stored"])
        table.unscored_rows += (len(table.rows),)
        table.rows.append([line, "mean tokens transferred", None,
                           *(num(by_layer[layer]["mean_transferred_tokens"], 1) if layer in by_layer else None
                             for layer in layers), num(full["mean_reasoning_tokens"], 1) if full else "not stored"])
        bounds = [_bounds(_scored(p.row, scores)) for p in points]
        percents = [100 * s.row["value"] for s in points]
        fig.add_trace(go.Scatter(x=[at[s.layer] for s in points], y=percents, mode="lines+markers",
                                 name=f"{line} (95 % intervals)", legendgroup=line, line={"color": colour},
                                 marker={"color": colour},
                                 error_y={"type": "data", "symmetric": False, "color": colour, "thickness": 1,
                                          "array": [high - v for v, (_, high) in zip(percents, bounds)],
                                          "arrayminus": [v - low for v, (low, _) in zip(percents, bounds)]}),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=[at[s.layer] for s in points], y=[s.row["mean_transferred_tokens"] for s in points],
                                 mode="lines+markers", name=f"{line}: transferred", legendgroup=line,
                                 showlegend=False, line={"color": colour}, marker={"color": colour}), row=1, col=2)
        points_y.extend(end for pair in bounds for end in pair)
        if full is not None:
            flat.append((f"{_baseline_name(full)} ({short(full['run_id'])})", 100 * full["value"],
                         {"dash": "dash", "color": colour}, line))
            if full["mean_reasoning_tokens"] is not None:  # Full's tokens: every reasoning token, in the token panel
                fig.add_trace(go.Scatter(x=edges, y=[full["mean_reasoning_tokens"]] * 2, mode="lines",
                                         line={"dash": "dash", "color": colour}, legendgroup=line, showlegend=False,
                                         name=f"{_baseline_name(full)}: every reasoning token"), row=1, col=2)
    if large_s is not None:
        flat.append((f"large S ({short(large_s['run_id'])})", 100 * large_s["value"],
                     {"dash": "dot", "color": "#6c757d"}, None))
    low, high = sweep_axis(points_y, [value for _, value, _, _ in flat])
    _flat_lines(fig, flat, (low, high), edges)
    fig.update_xaxes(title_text="transfer layer (0-based; measured layers only)", tickvals=list(at.values()),
                     ticktext=[f"L{layer}" for layer in layers], range=edges)
    fig.update_yaxes(title_text="score (%)" + (f", axis from {fixed(low, 0)}" if low > 0 else ""), range=[low, high],
                     row=1, col=1)
    fig.update_yaxes(title_text="mean tokens transferred", rangemode="tozero", row=1, col=2)
    section.figures.append(layout(fig, f"Transfer-layer sweep: {title}", key.group.key))
    section.tables.append(table)


def _flat_lines(fig: go.Figure, flat: list[tuple[str, float, dict[str, str], str | None]],
                axis: tuple[float, float], edges: list[float]) -> None:
    """The sweep's flat baselines across its layers; one off the axis sits at its edge, its value written there."""
    low, high = axis
    for name, value, style, group in flat:
        shown = min(max(value, low), high)
        fig.add_trace(go.Scatter(x=edges, y=[shown] * 2, mode="lines",
                                 line=style, legendgroup=group, name=name if shown == value else
                                 f"{name}: {fixed(value, 1)}, off the axis"), row=1, col=1)
        if shown != value:
            fig.add_annotation(x=edges[1], y=shown, xanchor="right", yanchor="top" if value > high
                               else "bottom", text=f"{name} {fixed(value, 1)} {'above' if value > high else 'below'}",
                               showarrow=False, font={"size": 10, "color": style["color"]}, row=1, col=1)


def sweep_axis(points: list[float], baselines: list[float]) -> tuple[float, float]:
    """Table 9's score axis: the sweep's own points, and each flat baseline unless it lies so far off that the
    sweep's points would take less than a quarter of the axis (such a baseline is drawn at the axis' edge with its
    value written beside it, instead of squashing the points to a line)."""
    low, high = min(points), max(points)
    span = max(high - low, 5.0)
    for value in sorted(baselines, key=lambda v: abs(v - (low + high) / 2)):
        if max(high, value) - min(low, value) <= 4 * span:
            low, high = min(low, value), max(high, value)
    pad = max(1.0, 0.08 * (high - low))
    return low - pad, high + pad


def _baseline_name(row: SweepRow) -> str:
    """A flat line of the sweep: the large model's S answers, or full transfer in either mode."""
    if row["setting"] == "large S":
        return "large S"
    return "MAI, full transfer" if row["mode"] == "cascade" else FULL_RT


def _pair(row: AttentionPairRow | HeadCellRow) -> str:
    return f"{row['model']} + {row['reasoning_model']} R"


def _group_of(row: CaptureGroupRow, sets: dict[str, SampleSet]) -> SampleSet:
    """The comparison group of attention rows: the sample set of the report's run that wrote or read them."""
    return sets[row["group_run"]]


def _figure_3(section: Section, rows: list[AttentionPairRow], sets: dict[str, SampleSet]) -> None:
    if not rows:
        section.notes.append(f"No attention captured for this report's runs: sparse RT captures it ({SWEEP_COMMAND}).")
        return
    groups = sorted({_group_of(r, sets) for r in rows})
    for group in groups:  # one chart and table per comparison group: no mean over two sample sets
        _figure_3_group(section, group, [r for r in rows if _group_of(r, sets) == group])
    if len({r["reasoning_model"] for r in rows}) == 1:
        section.notes.append("The paper sets the large model reading the small model's reasoning against it reading "
                             "its own (8B + 2B-R vs 8B + 8B-R); this report holds one reasoning model. A sweep of a "
                             "pair whose small model is the large one stores the other: <code>mai sweep "
                             "--small-model L --large-model L --layers 0,1,2</code>.")


def _figure_3_group(section: Section, group: SampleSet, rows: list[AttentionPairRow]) -> None:
    fig = subplots(rows=1, cols=2, horizontal_spacing=0.12,
                   subplot_titles=("(a) attention weight of all reasoning tokens",
                                   "(b) share of reasoning tokens holding 80 % of it"))
    for index, pair in enumerate(sorted({_pair(r) for r in rows})):
        colour = PALETTE[index % len(PALETTE)]  # both panels and the legend in one colour per pair
        mine = [r for r in rows if _pair(r) == pair]
        fig.add_trace(go.Scatter(x=[r["layer"] for r in mine], y=[r["attention"] for r in mine],
                                 mode="lines+markers", name=pair, legendgroup=pair,
                                 line={"color": colour}, marker={"color": colour}), row=1, col=1)
        fig.add_trace(go.Scatter(x=[r["layer"] for r in mine], y=[r["share_for_80"] for r in mine],
                                 mode="lines+markers", name=pair, legendgroup=pair, showlegend=False,
                                 line={"color": colour}, marker={"color": colour}), row=1, col=2)
    fig.update_xaxes(title_text="layer (0-based)", dtick=1)
    fig.update_yaxes(title_text="attention on the reasoning (mean over heads)", row=1, col=1)
    fig.update_yaxes(title_text="share of reasoning tokens", row=1, col=2)
    section.figures.append(layout(fig, f"{group.label}: attention on the small model's reasoning, per layer",
                                  group.key))
    section.tables.append(Table(["large + reasoning", "layer", "prefills", "reasoning tokens", "attention",
                                 "share for 80 %"],
                                [[_pair(r), r["layer"], r["prefills"], num(r["reasoning_tokens"], 1),
                                  num(r["attention"], 3), num(r["share_for_80"], 3)] for r in rows], group.label))


def _heatmaps(section: Section, heads: list[HeadCellRow], value: Callable[[HeadCellRow], float], label: str,
              sets: dict[str, SampleSet]) -> None:
    """Per comparison group, one head x layer heatmap per (large model, reasoning model): box plots cannot tell
    heads apart."""
    if not heads:
        section.notes.append(f"No attention captured for this report's runs ({SWEEP_COMMAND}).")
        return
    for group in sorted({_group_of(h, sets) for h in heads}):
        mine = [h for h in heads if _group_of(h, sets) == group]
        pairs = sorted({_pair(h) for h in mine})
        fig = subplots(rows=1, cols=len(pairs), subplot_titles=pairs, horizontal_spacing=0.1)
        for index, pair in enumerate(pairs, start=1):
            cells = {(h["head"], h["layer"]): float(value(h)) for h in mine if _pair(h) == pair}
            layers = sorted({layer for _, layer in cells})
            head_ids = sorted({head for head, _ in cells})
            z = [[cells.get((head, layer), math.nan) for layer in layers] for head in head_ids]
            # one column per captured layer, labelled by its index: numeric x would draw layers 1, 3, 5 as blocks
            # spanning 0-6, as if layers 0, 2, 4 and 6 were measured too
            fig.add_trace(go.Heatmap(x=[f"L{layer}" for layer in layers], y=head_ids, z=z, coloraxis="coloraxis",
                                     name=pair, hovertemplate="layer %{x}, head %{y}: %{z:.3f}<extra></extra>"),
                          row=1, col=index)
        fig.update_xaxes(title_text="captured layer (0-based)", type="category")
        fig.update_yaxes(title_text="head", dtick=1, row=1, col=1)
        section.figures.append(layout(fig, f"{group.label}: {label}, per head and layer", group.key,
                                      coloraxis={"colorbar": {"title": label}}))


def _table_16(section: Section, captures: list[ExampleWeightsRow], sets: dict[str, SampleSet]) -> None:
    """As the paper lays it out, over one sample's reasoning per model pair: a row per layer and pair, the share
    (and number) of reasoning tokens that hold 80 % of the head-averaged attention, which is what sparse RT
    selects at delta 0.8 (`mai.transfer.select_indices`), and the 15 top-ranked tokens with their share."""
    if not captures:
        section.notes.append(f"No attention captured for this report's runs ({SWEEP_COMMAND}).")
        return
    for group in sorted({_group_of(c, sets) for c in captures}):
        table = Table(["layer", "large + reasoning", "sample", "N-tok (80 %)",
                       *(_ordinal(i) for i in range(1, TOP_RANKS + 1))], [], group.label,
                      wrap=("large + reasoning",), group=group.key)
        for capture in sorted((c for c in captures if _group_of(c, sets) == group),
                              key=lambda c: (c["layer"], c["pair"])):
            weights, total = capture["weights"], sum(capture["weights"])
            kept = tokens_to_reach(weights, 0.8)
            share = f"{fixed(100 * kept / len(weights), 1)} % ({kept})" if weights else None
            order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))[:TOP_RANKS]
            table.rows.append([f"L{capture['layer']}", capture["pair"], capture["sample_id"], share,
                               *(_token(capture["token_texts"][i], weights[i] / total if total else 0.0)
                                 for i in order), *[None] * (TOP_RANKS - len(order))])
        section.tables.append(table)
    section.notes.append("One sample per model pair and comparison group (the first captured at every layer), as "
                         "the paper shows one; each token's weight is averaged over the heads before ranking, as in "
                         "the paper and as sparse RT selects.")


def _ordinal(n: int) -> str:
    return f"{n}" + ({1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th") if n not in (11, 12, 13) else "th")


def _token(text: str, share: float) -> str:
    """A ranked token and its share; blank tokens (spaces, newlines) as their repr."""
    return f"{text.strip() or repr(text)} {fixed(100 * share, 1)}%"
