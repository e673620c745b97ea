"""The report's sections: each reads the catalog views (through `mai.dashboards.views.fetch`, the saved queries
of this folder where one exists) and returns a `Section`: its Plotly figures, its tables and its notes. The
HTML around them is `mai.dashboards.report`'s; the trace browser is `mai.dashboards.traces`."""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from mai.dashboards.saved import load_saved
from mai.dashboards.views import (
    HEADLINE,
    USED_GENERATIONS,
    Row,
    default_profile,
    fetch,
    run_label,
    run_models,
)
from mai.storage.paths import Home
from plotly.subplots import make_subplots

COLORS = {"MV1": "#2a9d8f", "MV2": "#e9c46a", "RT": "#e76f51", "ERROR": "#6c757d", "SINGLE": "#457b9d"}


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]
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


@dataclass
class Store:
    """What several sections read, read once."""

    home: Home
    runs: list[Row]                                  # the report's runs, oldest first
    all_runs: list[Row]                              # every completed run (baselines may lie outside the selection)
    scores: dict[str, dict[str, float]]              # run -> sample -> score, the benchmark's default profile
    tokens: dict[str, int]                           # run -> output tokens of the generations it used
    headline: dict[str, tuple[str, float]]           # run -> (metric, value), default profile

    @property
    def run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.runs]


def read_store(home: Home, run_ids: Sequence[str] | None) -> Store:
    all_runs = fetch(home, "SELECT * FROM runs ORDER BY started_at, run_id")
    runs = all_runs if run_ids is None else [r for r in all_runs if r["run_id"] in set(run_ids)]
    profiles = {r["run_id"]: default_profile(r["benchmark"]) for r in all_runs}
    scores: dict[str, dict[str, float]] = defaultdict(dict)
    for row in fetch(home, "SELECT run_id, sample_id, scorer_profile, score FROM scores"):
        if profiles.get(row["run_id"]) == row["scorer_profile"] and row["score"] is not None:
            scores[row["run_id"]][row["sample_id"]] = float(row["score"])
    tokens = {r["run_id"]: int(r["tokens"] or 0) for r in fetch(
        home, f"SELECT u.run_id, sum(g.output_tokens) AS tokens FROM ({USED_GENERATIONS}) u "
              "JOIN generations g ON g.gen_id = u.gen_id GROUP BY u.run_id")}
    headline = {r["run_id"]: (r["metric"], float(r["value"])) for r in fetch(home, HEADLINE)
                if profiles.get(r["run_id"]) == r["scorer_profile"]}
    return Store(home, runs, all_runs, dict(scores), tokens, headline)


# plotly_white's look in a few keys: assigning the named template deep-copies ~6 KB per figure (~30 ms each)
_AXIS = {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "linecolor": "#ebf0f8", "automargin": True}
TEMPLATE = go.layout.Template(layout={
    "colorway": ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880",
                 "#FF97FF", "#FECB52"],
    "font": {"color": "#2a3f5f"}, "paper_bgcolor": "white", "plot_bgcolor": "white", "xaxis": _AXIS,
    "yaxis": _AXIS, "hovermode": "closest", "title": {"x": 0.05}})


def figure(*traces: Any) -> go.Figure:
    return go.Figure(list(traces), layout={"template": TEMPLATE})


def subplots(**options: Any) -> go.Figure:
    return make_subplots(figure=figure(), **options)


def _layout(fig: go.Figure, title: str, **extra: Any) -> go.Figure:
    fig.update_layout(title=title, height=extra.pop("height", 420),
                      margin={"l": 60, "r": 20, "t": 60, "b": 50}, **extra)
    return fig


def merged_labels(xs: Sequence[float], ys: Sequence[float], labels: Sequence[str], log_x: bool = False
                  ) -> list[str]:
    """Text labels for a scatter where points that (nearly) coincide share one label, stacked, on the first of
    them: overlapping labels are unreadable. Closeness is measured on the axes' normalised ranges."""
    import math

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


def _named(run: Row) -> str:
    return f"{run_label(run)} ({short(run['run_id'])})"


# --- 1. figure 1 ---------------------------------------------------------------------------------------------


def figure_one(store: Store) -> Section:
    section = Section("figure-1", "Accuracy vs output tokens (paper figure 1)",
                      "One point per stored run: the headline metric (F1 for POPE, else the benchmark's accuracy "
                      "or ANLS, default scorer profile) against the mean output tokens per sample of every "
                      "generation the run used. Colour: the model or pair; label: the setting (model, prompt "
                      "kind, S2, cascade variant).")
    rows = []
    for run in store.runs:
        if run["run_id"] not in store.headline or not run["n_valid"]:
            continue
        metric, value = store.headline[run["run_id"]]
        rows.append([run["benchmark"], run_models(run), run_label(run), metric, 100 * value,
                     store.tokens.get(run["run_id"], 0) / run["n_valid"], run["run_id"]])
    for benchmark in sorted({r[0] for r in rows}):
        fig = figure()
        mine = sorted((r for r in rows if r[0] == benchmark), key=lambda r: r[1])
        texts = dict(zip((r[6] for r in mine), merged_labels([r[5] for r in mine], [r[4] for r in mine],
                                                             [r[2] for r in mine], log_x=True)))
        for models in sorted({r[1] for r in mine}):
            points = [r for r in mine if r[1] == models]
            fig.add_trace(go.Scatter(x=[r[5] for r in points], y=[r[4] for r in points], mode="markers+text",
                                     name=models, text=[texts[r[6]] for r in points], textposition="top center",
                                     marker={"size": 11}, customdata=[[r[2], r[6]] for r in points],
                                     hovertemplate="%{customdata[0]}: %{y:.1f} at %{x:.1f} tokens<br>"
                                                   "%{customdata[1]}<extra></extra>"))
        _layout(fig, f"{benchmark}: {mine[0][3]} vs mean output tokens per sample",
                xaxis={"title": "mean output tokens per sample (log)", "type": "log"},
                yaxis={"title": f"{mine[0][3]} (%)"})
        section.figures.append(fig)
    section.tables.append(Table(["benchmark", "models", "setting", "metric", "value %", "tokens / sample", "run"],
                                [[*r[:4], f"{r[4]:.1f}", f"{r[5]:.1f}", r[6]] for r in rows]))
    return section


# --- 2. table 10: routing funnel -------------------------------------------------------------------------------


BASELINES: dict[str, Callable[[Row, Row], bool]] = {
    "small S": lambda c, r: _single(r, "small", "S") and r["small_model"] == c["small_model"],
    "small R": lambda c, r: _single(r, "small", "R") and r["small_model"] == c["small_model"],
    "large S": lambda c, r: _single(r, "large", "S") and r["large_model"] == c["large_model"],
    "Full RT": lambda c, r: r["mode"] == "full_rt" and r["transfer"] == "full"
    and (r["small_model"], r["large_model"]) == (c["small_model"], c["large_model"]),
}


def _single(run: Row, role: str, prompt: str) -> bool:
    return bool(run["mode"] == "single" and run["single_model"] == role and run["single_prompt"] == prompt
                and not run["s2"])


def routing_funnel(store: Store) -> Section:
    section = Section("routing-funnel", "Routing funnel (paper table 10)",
                      "Per cascade run: how many samples mutual verification 1 (small S = large S), mutual "
                      "verification 2 (small R = large S) and reasoning transfer decided, and the final score, next "
                      "to the baselines scored over the same samples (the latest stored run of each setting on the "
                      "same data and models). A row is marked when MV1 + MV2 + RT + errors does not add up to the "
                      "run's samples.")
    cascades = [r for r in store.runs if r["mode"] == "cascade"]
    if not cascades:
        section.notes.append("No cascade run in this report: `mai run` (mode cascade) stores one.")
        return section
    counts = {r["run_id"]: {label: 0 for label in COLORS} for r in cascades}
    for row in fetch(store.home, "SELECT run_id, route, count(*) AS n FROM routes WHERE list_contains(?, run_id) "
                                 "GROUP BY ALL", [[r["run_id"] for r in cascades]]):
        counts[row["run_id"]][row["route"]] = int(row["n"])
    funnel = figure()
    names = [_named(r) for r in cascades]
    for label in ("MV1", "MV2", "RT", "ERROR"):
        shares = [100 * counts[r["run_id"]][label] / r["n_samples"] for r in cascades]
        funnel.add_trace(go.Bar(y=names, x=shares, name=label, orientation="h", marker_color=COLORS[label],
                                text=[str(counts[r["run_id"]][label]) for r in cascades], textposition="inside"))
    section.figures.append(_layout(funnel, "Share of samples decided at each stage", barmode="stack",
                                   xaxis={"title": "% of samples"}, height=160 + 40 * len(cascades)))
    table = Table(["run", "setting", "samples", "MV1", "MV2", "RT", "errors", "check", "final %",
                   *BASELINES], [], "Baselines: mean score over the cascade's samples (n shared)")
    compared = figure()
    bars: dict[str, list[float | None]] = {name: [] for name in ["MAI", *BASELINES]}
    for run in cascades:
        c, n = counts[run["run_id"]], run["n_samples"]
        total = c["MV1"] + c["MV2"] + c["RT"] + c["ERROR"]
        own = store.scores.get(run["run_id"], {})
        final = 100 * sum(own.values()) / len(own) if own else None
        bars["MAI"].append(final)
        cells = []
        for name, matches in BASELINES.items():
            value, shared = _baseline_score(store, run, own, matches)
            bars[name].append(value)
            cells.append(f"{value:.1f} (n={shared})" if value is not None else "not stored")
        table.rows.append([run["run_id"], run_label(run), n, *(f"{c[k]} ({100 * c[k] / n:.1f} %)"
                           for k in ("MV1", "MV2", "RT")), c["ERROR"],
                           "ok" if total == n else f"counts add up to {total}, not {n}",
                           f"{final:.1f}" if final is not None else "-", *cells])
        table.classes.append("" if total == n else "warning")
    for name, values in bars.items():
        compared.add_trace(go.Bar(x=names, y=values, name=name))
    section.figures.append(_layout(compared, "Final score vs the baselines on the same samples", barmode="group",
                                   yaxis={"title": "mean score (%)"}))
    section.tables.append(table)
    return section


def _baseline_score(store: Store, cascade: Row, own: dict[str, float], matches: Callable[[Row, Row], bool]
                    ) -> tuple[float | None, int]:
    candidates = [r for r in store.all_runs if r["dataset_fingerprint"] == cascade["dataset_fingerprint"]
                  and matches(cascade, r)]
    if not candidates:
        return None, 0
    theirs = store.scores.get(candidates[-1]["run_id"], {})
    shared = [sid for sid in own if sid in theirs]
    return (100 * sum(theirs[s] for s in shared) / len(shared), len(shared)) if shared else (None, 0)


# --- 3. tables 6 and 15: S2 -------------------------------------------------------------------------------------


CHANGED = """
    SELECT x.sample_id, x.category, x.final_answer AS without_s2, y.final_answer AS with_s2, x.reference,
           x.score AS score_without, y.score AS score_with, x.route AS route_without, y.route AS route_with
    FROM routes x JOIN routes y ON y.sample_id = x.sample_id
    WHERE x.run_id = ? AND y.run_id = ? AND x.final_answer IS DISTINCT FROM y.final_answer
    ORDER BY length(x.sample_id), x.sample_id
"""


def s2_toggle(store: Store) -> Section:
    section = Section("s2", "S2 vs non-S2 on the same samples (paper tables 6 and 15)",
                      "Pairs of runs that differ only in the S2 stage (the small model re-answers after its own "
                      "reasoning): single-model runs (table 6) and cascades (table 15, where S2 changes how often "
                      "MV2 settles a sample and how often RT is needed), with every sample whose answer changed.")
    pairs = [p for p in fetch(store.home, load_saved("s2_vs_non_s2"))
             if p["run_without_s2"] in store.run_ids or p["run_with_s2"] in store.run_ids]
    if not pairs:
        section.notes.append("No pair of runs differing only in S2: store one with `mai run ... --s2` next to the "
                             "same run without it.")
        return section
    fig = subplots(rows=1, cols=2, subplot_titles=("MV2 and RT counts", "score (%)"))
    labels = [f"{p['mode']} {short(p['run_without_s2'])} / {short(p['run_with_s2'])}" for p in pairs]
    for key, name in (("mv2", "MV2"), ("rt", "RT")):
        for s2, pattern in ((False, ""), (True, "/")):
            suffix = "with_s2" if s2 else "without_s2"
            fig.add_trace(go.Bar(x=labels, y=[p[f"{key}_{suffix}"] for p in pairs], name=f"{name} {suffix}",
                                 marker_color=COLORS[name], marker_pattern_shape=pattern), row=1, col=1)
    for suffix, pattern in (("without_s2", ""), ("with_s2", "/")):
        fig.add_trace(go.Bar(x=labels, y=[100 * p[f"accuracy_{suffix}"] for p in pairs], name=f"score {suffix}",
                             marker_color="#457b9d", marker_pattern_shape=pattern), row=1, col=2)
    section.figures.append(_layout(fig, "S2 toggled: routing and score", barmode="group"))
    section.tables.append(Table(
        ["mode", "without S2", "with S2", "samples", "score without %", "score with %", "MV2 without", "MV2 with",
         "RT without", "RT with", "answers changed"],
        [[p["mode"], p["run_without_s2"], p["run_with_s2"], p["common_samples"],
          f"{100 * p['accuracy_without_s2']:.1f}", f"{100 * p['accuracy_with_s2']:.1f}", p["mv2_without_s2"],
          p["mv2_with_s2"], p["rt_without_s2"], p["rt_with_s2"], p["answers_changed"]] for p in pairs]))
    for p in pairs:
        changed = fetch(store.home, CHANGED, [p["run_without_s2"], p["run_with_s2"]])
        section.tables.append(Table(
            ["sample", "category", "answer without S2", "answer with S2", "reference", "score without",
             "score with", "route without", "route with"],
            [[c["sample_id"], c["category"], c["without_s2"], c["with_s2"], c["reference"], c["score_without"],
              c["score_with"], c["route_without"], c["route_with"]] for c in changed],
            f"Answers changed by S2: {p['run_without_s2']} -> {p['run_with_s2']} ({len(changed)})"))
    return section


# --- 4. table 9, figures 3-5, table 16: sparse transfer ---------------------------------------------------------


def layer_sweep(store: Store) -> Section:
    section = Section("layer-sweep", "Sparse reasoning transfer: layer sweep and attention (paper table 9, "
                      "figures 3-5, table 16)",
                      "Sparse RT transfers only the reasoning tokens the large model attends to at layer L (those "
                      "covering delta of the attention). Per layer: the score and the transferred tokens next to full "
                      "RT and the large model's S answers; the attention the last prompt position pays to the small "
                      "model's reasoning, the share of reasoning tokens each head needs for 80 % of it (head-wise "
                      "sparsity: small = sparse), and the most attended reasoning tokens.")
    sweep = [r for r in fetch(store.home, load_saved("transfer_layer_sweep")) if r["run_id"] in store.run_ids]
    sparse = [r for r in sweep if r["setting"] == "sparse RT"]
    if sparse:
        fig = subplots(rows=1, cols=2, subplot_titles=("score by transfer layer", "tokens transferred"))
        for delta in sorted({r["delta"] for r in sparse}):
            points = sorted((r for r in sparse if r["delta"] == delta), key=lambda r: r["layer"])
            fig.add_trace(go.Scatter(x=[r["layer"] for r in points], y=[100 * r["value"] for r in points],
                                     mode="lines+markers", name=f"sparse RT, delta {delta:g}"), row=1, col=1)
            fig.add_trace(go.Scatter(x=[r["layer"] for r in points], y=[r["mean_transferred_tokens"] for r in points],
                                     mode="lines+markers", name=f"transferred tokens, delta {delta:g}"), row=1, col=2)
            fig.add_trace(go.Scatter(x=[r["layer"] for r in points], y=[r["mean_reasoning_tokens"] for r in points],
                                     mode="lines", line={"dash": "dot"}, name="reasoning tokens"), row=1, col=2)
        layers = [r["layer"] for r in sparse]
        for r in sweep:
            if r["setting"] != "sparse RT":
                fig.add_trace(go.Scatter(x=[min(layers), max(layers)], y=[100 * r["value"]] * 2, mode="lines",
                                         line={"dash": "dash"}, name=f"{r['setting']} ({r['mode']}, "
                                                                     f"{short(r['run_id'])})"), row=1, col=1)
        fig.update_xaxes(title_text="layer (0-based)", dtick=1)
        section.figures.append(_layout(fig, "Transfer-layer sweep"))
    else:
        section.notes.append("No sparse-RT run in this report: `mai sweep --layers 4,8,12` stores a sweep.")
    section.tables.append(Table(["setting", "layer", "delta", "mode", "RT samples", "reasoning tokens",
                                 "transferred tokens", "share kept", "metric", "value %", "run"],
                                [[r["setting"], r["layer"], r["delta"], r["mode"], r["rt_samples"],
                                  _num(r["mean_reasoning_tokens"]), _num(r["mean_transferred_tokens"]),
                                  _num(r["mean_share_selected"]), r["metric"], f"{100 * r['value']:.1f}", r["run_id"]]
                                 for r in sweep]))
    _attention(store, section)
    return section


def _attention(store: Store, section: Section) -> None:
    models = sorted({r["large_model"] for r in store.runs if r["large_model"]})
    per_layer = [r for r in fetch(store.home, load_saved("attention_by_layer")) if r["model"] in models]
    if not per_layer:
        section.notes.append("No attention captured for this report's large models (sparse RT captures it).")
        return
    fig = subplots(rows=1, cols=2, subplot_titles=("attention on the reasoning (mean over heads)",
                                                        "share of reasoning tokens per head for 80 % of it"))
    for model in models:
        mine = [r for r in per_layer if r["model"] == model]
        fig.add_trace(go.Scatter(x=[r["layer"] for r in mine], y=[r["mean_attention_on_reasoning"] for r in mine],
                                 mode="lines+markers", name=f"{model}: attention mass"), row=1, col=1)
    heads = fetch(store.home, "SELECT model, layer, unnest(head_tokens_for_80) / n_reasoning_tokens AS share "
                              "FROM attention WHERE n_reasoning_tokens > 0 AND list_contains(?, model)", [models])
    for model in models:
        mine = [r for r in heads if r["model"] == model]
        fig.add_trace(go.Box(x=[r["layer"] for r in mine], y=[r["share"] for r in mine], name=f"{model}: heads",
                             boxpoints="outliers"), row=1, col=2)
    fig.update_xaxes(title_text="layer (0-based)", dtick=1)
    section.figures.append(_layout(fig, "Attention on the small model's reasoning, per layer (figures 3-5)"))
    top = [r for r in fetch(store.home, load_saved("top_reasoning_tokens")) if r["model"] in models and r["rank"] <= 10]
    layers = sorted({r["layer"] for r in top})
    tokens = subplots(rows=1, cols=len(layers), subplot_titles=[f"layer {layer}" for layer in layers])
    for i, layer in enumerate(layers, start=1):
        mine = sorted((r for r in top if r["layer"] == layer), key=lambda r: -r["rank"])
        tokens.add_trace(go.Bar(x=[100 * r["share"] for r in mine], y=[repr(r["token"]) for r in mine],
                                orientation="h", name=f"layer {layer}", showlegend=False), row=1, col=i)
    tokens.update_xaxes(title_text="% of the layer's attention on reasoning")
    section.figures.append(_layout(tokens, "Most attended reasoning tokens (table 16)", height=460))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# --- 5. tables 1-4, 11, 12: latency ----------------------------------------------------------------------------


def latency(store: Store) -> Section:
    section = Section("latency", "Latency: profiles, estimated and measured time, speed-up (paper tables 1-4, "
                      "11, 12)",
                      "Profiles (measured with `mai profile` or imported from published numbers): TTFT against the "
                      "input length, decoding speed, and, for measured profiles, preprocessing and the vision "
                      "encoder against the image size. Then each run's time: estimated from its stored token "
                      "counts under a profile per model (equation 27, `mai estimate`) and measured (stored per-call "
                      "wall time, batch-amortised), with the speed-up against the large model's R run.")
    profiles = fetch(store.home, "SELECT * FROM latency_profiles ORDER BY profile_name, input_tokens, image_resolution")
    if profiles:
        names = sorted({p["profile_name"] for p in profiles})
        fig = subplots(rows=1, cols=2, subplot_titles=("TTFT vs input tokens (tables 3-4)",
                                                            "decoding speed (tokens / s)"))
        for name in names:
            mine = [p for p in profiles if p["profile_name"] == name and p["ttft_ms"] is not None]
            by_length: dict[int, list[float]] = defaultdict(list)  # several image sizes / outputs per length: mean
            for p in mine:
                by_length[int(p["input_tokens"])].append(float(p["ttft_ms"]))
            lengths = sorted(by_length)
            fig.add_trace(go.Scatter(x=lengths, y=[sum(by_length[n]) / len(by_length[n]) for n in lengths],
                                     mode="markers+lines", name=f"{name} ({mine[0]['model'] if mine else ''})"),
                          row=1, col=1)
        speeds = [(n, [p["tokens_per_s"] for p in profiles if p["profile_name"] == n and p["tokens_per_s"]])
                  for n in names]
        fig.add_trace(go.Bar(x=[n for n, s in speeds if s], y=[sum(s) / len(s) for _, s in speeds if s],
                             name="tokens / s", showlegend=False), row=1, col=2)
        fig.update_xaxes(title_text="input tokens", type="log", row=1, col=1)
        fig.update_yaxes(title_text="TTFT (ms)", row=1, col=1)
        section.figures.append(_layout(fig, "Latency profiles"))
        measured = [p for p in profiles if p["vision_ms"] is not None]
        if measured:
            stages = subplots(rows=1, cols=2, subplot_titles=("per image resolution (tables 1-2)",
                                                                   "decode time per output length"))
            for name in sorted({p["profile_name"] for p in measured}):
                mine = [p for p in measured if p["profile_name"] == name]
                for column in ("preprocess_ms", "vision_ms", "ttft_ms"):
                    stages.add_trace(go.Scatter(x=[p["image_resolution"] for p in mine], y=[p[column] for p in mine],
                                                mode="markers", name=f"{name}: {column}"), row=1, col=1)
                stages.add_trace(go.Scatter(x=[p["output_tokens"] for p in mine], y=[p["decode_ms"] for p in mine],
                                            mode="markers", name=f"{name}: decode_ms"), row=1, col=2)
            stages.update_xaxes(title_text="image side (px)", row=1, col=1)
            stages.update_xaxes(title_text="output tokens", row=1, col=2)
            stages.update_yaxes(title_text="ms")
            section.figures.append(_layout(stages, "Measured profiles: preprocessing, vision encoder, TTFT, decode"))
    else:
        section.notes.append("No latency profile stored: `mai profile MODEL --name NAME` or `mai import-profile`.")
    _speedup(store, section)
    _speculative(store, section)
    return section


SPECULATIVE = """
    SELECT run_id, large_model, small_model, draft_tokens, count(*) AS samples, avg(acceptance_rate) AS acceptance,
           sum(speculative_wall_s) AS speculative_s, sum(plain_wall_s) AS plain_s,
           sum(plain_wall_s) / sum(speculative_wall_s) AS speedup, bool_and(identical_to_greedy) AS identical
    FROM speculative WHERE list_contains(?, run_id) GROUP BY ALL ORDER BY run_id, draft_tokens
"""


def _speculative(store: Store, section: Section) -> None:
    """Table 12's token-level speculative-decoding baseline (`mai speculative`), where stored."""
    rows = fetch(store.home, SPECULATIVE, [store.run_ids])
    if rows:
        section.tables.append(Table(
            ["large R run", "large", "small (draft)", "draft tokens", "samples", "acceptance", "speculative s",
             "large alone s", "speed-up", "identical to greedy"],
            [[r["run_id"], r["large_model"], r["small_model"], r["draft_tokens"], r["samples"], _num(r["acceptance"]),
              _num(r["speculative_s"]), _num(r["plain_s"]), _num(r["speedup"]), r["identical"]] for r in rows],
            "Speculative decoding (table 12): the small model drafts, the large verifies (batch size 1)"))


def _speedup(store: Store, section: Section) -> None:
    rows = [r for r in fetch(store.home, load_saved("speedup")) if r["run_id"] in store.run_ids]
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
        section.figures.append(_layout(fig, title, barmode="group", yaxis={"title": "seconds (log)", "type": "log"}))
    section.tables.append(Table(
        ["benchmark", "estimate", "setting", "output tokens", "estimated s", "measured s", "est. speed-up vs large R",
         "measured speed-up vs large R", "run"],
        [[r["benchmark"], r["estimate_name"], r["setting"], r["output_tokens"], _num(r["estimated_s"]),
          _num(r["measured_s"]), _num(r["estimated_speedup_vs_large_r"]), _num(r["measured_speedup_vs_large_r"]),
          r["run_id"]] for r in rows]))


# --- 6. policy lab ---------------------------------------------------------------------------------------------


def policy_lab(store: Store) -> Section:
    from mai.dashboards.policies import policy_labs

    from mai.errors import ConfigError

    section = Section("policy-lab", "Routing-policy lab (no model runs)",
                      "Every stored per-sample output of a model pair on a split (small S, large S, small R, "
                      "small R+S2, large R, RT) combined offline into routing policies, each scored and priced "
                      "(equation-27 seconds under the pair's latency profiles when an estimate is stored, else "
                      "output tokens). The oracle takes per sample the cheapest stored answer that is right. The line "
                      "is the Pareto frontier; APGR-style area: the best performance gap recovered between small S "
                      "and large S reachable within a budget, averaged over the budget range.")
    try:
        labs = [lab for lab in policy_labs(store.home)
                if {r["run_id"] for r in lab["runs"]} & set(store.run_ids)]
    except ConfigError as error:
        labs = []
        section.notes.append(html.escape(str(error)))
    for lab in labs:
        _one_lab(section, lab)
    return section


def _one_lab(section: Section, lab: dict[str, Any]) -> None:
    axis = lab["cost_axis"]
    unit = "estimated seconds" if axis == "seconds" else "mean output tokens per sample"
    usable = [p for p in lab["policies"] if p["available"]]
    fig = figure()
    plain = [p for p in usable if p["name"] != "oracle"]
    fig.add_trace(go.Scatter(x=[p[axis] for p in plain], y=[100 * p["mean_score"] for p in plain],
                             mode="markers+text", textposition="top center", hovertext=[p["name"] for p in plain],
                             text=merged_labels([p[axis] for p in plain], [p["mean_score"] for p in plain],
                                                [p["name"] for p in plain]),
                             name="policies", marker={"size": 10, "color": "#457b9d"}))
    frontier = [p for name in lab["summary"]["frontier"] for p in plain if p["name"] == name]
    fig.add_trace(go.Scatter(x=[p[axis] for p in frontier], y=[100 * p["mean_score"] for p in frontier],
                             mode="lines", line={"shape": "hv", "color": "#e76f51"}, name="Pareto frontier"))
    for p in usable:
        if p["name"] == "oracle":
            fig.add_trace(go.Scatter(x=[p[axis]], y=[100 * p["mean_score"]], mode="markers+text", text=["oracle"],
                                     textposition="bottom center", name="oracle",
                                     marker={"symbol": "star", "size": 16, "color": "#2a9d8f"}))
    title = f"{lab['benchmark']}: {lab['small_model']} + {lab['large_model']} ({lab['samples']} samples)"
    section.figures.append(_layout(fig, title, xaxis={"title": unit}, yaxis={"title": "mean score (%)"}))
    summary = lab["summary"]
    profiles = ", ".join(f"{role} {name}" for role, name in (lab["latency_profiles"] or {}).items()) or "none"
    caption = (f"Scorer profile {lab['scorer_profile']}; latency profiles: {profiles}. "
               + (f"APGR-style area: {summary['apgr']:.3f} with every policy, {summary['apgr_baselines']:.3f} with "
                  f"single-output baselines only; oracle PGR {summary['oracle_pgr']:.2f}."
                  if summary["apgr"] is not None else ""))
    section.tables.append(Table(
        ["policy", "score %", lab["policies"][0]["metric"] or "metric", "PGR", "tokens / sample", "small calls",
         "large calls", "est. s", "Pareto", "routes", "what it does"],
        [[p["name"], f"{100 * p['mean_score']:.1f}", _num(p["metric_value"]), _num(p["pgr"]),
          f"{p['mean_output_tokens']:.1f}", p["small_calls"], p["large_calls"], _num(p["seconds"]),
          "yes" if p["pareto"] else "", " ".join(f"{k}={v}" for k, v in p["routes"].items()), p["description"]]
         for p in usable], caption, wrap=("routes", "what it does")))
    for p in lab["policies"]:
        if not p["available"]:
            section.notes.append(f"{html.escape(p['name'])}: outputs not stored for {p['missing_samples']} samples "
                                 f"({', '.join(p['missing_outputs'])}); store them with "
                                 + " and ".join(f"<code>{html.escape(c)}</code>" for c in p["commands"]))


# --- run vs run ----------------------------------------------------------------------------------------------


def comparison(store: Store, run_a: str, run_b: str) -> Section:
    from mai.dashboards.compare import compare_runs

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
    section.figures.append(_layout(fig, "Difference B - A (points) with the 95 % bootstrap interval",
                                   yaxis={"title": "points"}))
    section.tables.append(Table(["subset", "n", "A %", "B %", "B - A", "95 % CI", "better", "worse", "p", "test"],
                                [[r["subset"], r["n"], f"{100 * r['mean_a']:.1f}", f"{100 * r['mean_b']:.1f}",
                                  f"{100 * r['difference']:+.1f}",
                                  f"[{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]", r["better"], r["worse"],
                                  f"{r['p_value']:.3g}", r["test"]] for r in rows]))
    cost = result["cost"]
    section.notes.append("; ".join([(f"Output tokens on the paired samples: A {cost['output_tokens_a']}, B "
                                    f"{cost['output_tokens_b']} ({cost['output_tokens_difference']:+d})")]
                                   + [f"estimate {html.escape(e['estimate_name'])}: A {e['seconds_a']:.2f} s, "
                                      f"B {e['seconds_b']:.2f} s" for e in cost["estimates"]]))
    section.tables.append(Table(["sample", "category", "score A", "score B", "route A", "route B"],
                                [[c["sample_id"], c["category"], c["score_a"], c["score_b"], c["route_a"],
                                  c["route_b"]] for c in result["changed"]],
                                f"Samples whose score changed ({len(result['changed'])})"))
    return section
