"""What every report section reads (`Store`) and the sections on routing: the routing funnel (table 10) and S2 vs
non-S2 (tables 6, 15). Each section reads the catalog views (through `mai.dashboards.views.fetch`, the saved
queries of this folder where one exists) and returns a `Section`: its Plotly figures, its tables, its notes and its
paper items as subsections. The HTML around them is `mai.dashboards.report`'s; the other sections: figure 1
`figure_one`, tables 5, 7, 8, 13, 14 and the runs' provenance `paper_tables`, table 9, figures 3-5 and table 16
`transfer_section`, tables 1-4, 11, 12 `latency_section`, the policy lab and run vs run `result_sections`, the
trace browser `traces`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial

import plotly.graph_objects as go

from mai import cascade
from mai.dashboards.charts import (
    COLORS,
    DASH,
    Hover,
    Section,
    Table,
    figure,
    layout,
    mark,
    score_range,
    short,
    subplots,
)
from mai.dashboards.groups import (
    SampleSet,
    Scored,
    family,
    given_name,
    group_caption,
    group_runs,
    latest,
    model_families,
    paired_cell,
    read_sample_sets,
    score_cell,
    scores_grid,
)
from mai.dashboards.labels import setting_labels
from mai.dashboards.outputs import OUTPUT_KINDS, OutputKind
from mai.dashboards.rounding import fixed
from mai.dashboards.rows import (
    HeadlineRow,
    MissingRow,
    RouteCountRow,
    RunTokensRow,
    S2ChangedRow,
    S2PairRow,
    ScoreRow,
)
from mai.dashboards.saved import load_saved
from mai.dashboards.views import (
    HEADLINE,
    USED_GENERATIONS,
    default_profile,
    fetch,
    read_runs,
    role_model,
    run_label,
    run_models,
)
from mai.paired import mean_interval
from mai.storage.paths import Home
from mai.storage.rows import RunRow


@dataclass
class Store:
    """What several sections read, read once."""

    home: Home
    runs: list[RunRow]                               # the report's runs, oldest first
    all_runs: list[RunRow]                           # every completed run (baselines may lie outside the selection)
    scores: dict[str, dict[str, float]]              # run -> sample -> score, the benchmark's default profile
    tokens: dict[str, int]                           # run -> output tokens of the generations it used
    headline: dict[str, tuple[str, float]]           # run -> (metric, value), default profile
    sample_sets: dict[str, SampleSet]                # run -> its comparison group (mai.dashboards.groups)
    families: dict[str, str]                         # model -> family, as runs recorded it
    # run -> (outputs missing, outputs used): routes name a generation the store no longer holds (a deleted or
    # moved generations file); the run's tokens and times add up only what is left, so no cell shows them as whole
    missing: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.runs]

    def scored(self, run_id: str) -> Scored | None:
        """The run's headline and per-sample scores (None for a run without a headline)."""
        if run_id not in self.headline:
            return None
        metric, value = self.headline[run_id]
        return Scored(run_id, metric, value, self.scores.get(run_id, {}))

    def groups(self, runs: list[RunRow] | None = None) -> dict[SampleSet, list[RunRow]]:
        """`runs` (the report's) per comparison group."""
        return group_runs(self.runs if runs is None else runs, self.sample_sets)

    def family(self, model: str | None) -> str | None:
        return family(self.families, model)

    @cached_property
    def settings(self) -> dict[str, str]:
        """Run id -> its setting as tables name it, with what sets it apart from its group's runs of the same
        setting and models ('MAI (prompt 2)', mai.dashboards.labels)."""
        return setting_labels(self.all_runs, self.sample_sets)

    def lost(self, run_id: str | None) -> str | None:
        """'3 of 41 outputs missing' for a run whose stored outputs are not all there, else None."""
        if run_id is None or run_id not in self.missing:
            return None
        gone, used = self.missing[run_id]
        return f"{gone} of {used} outputs missing"

    def missing_note(self) -> str | None:
        """One line naming the report's runs with missing outputs (`mai report` prints it as a note)."""
        mine = {r: self.missing[r] for r in self.run_ids if r in self.missing}
        if not mine:
            return None
        return (f"{len(mine)} run(s) miss stored outputs ("
                + ", ".join(f"{run}: {self.lost(run)}" for run in mine)
                + "); their token and time cells say so instead of a partial number (`mai store verify` checks "
                  "the store)")

    def setting(self, run: RunRow) -> str:
        return self.settings.get(run["run_id"]) or run_label(run)

    def elsewhere(self, group: SampleSet, matches: Callable[[RunRow], bool]) -> str:
        """Why a cell of `group` is missing: the matching runs stored over other samples of the benchmark, or none."""
        others = [r["run_id"] for r in self.all_runs if matches(r) and r["benchmark"] == group.benchmark
                  and r["run_id"] in self.sample_sets and self.sample_sets[r["run_id"]] != group]
        return f"not on these samples (run {others[-1]}: n={self.sample_sets[others[-1]].n})" if others else "not stored"


def read_store(home: Home, run_ids: Sequence[str] | None) -> Store:
    all_runs = read_runs(home)
    runs = all_runs if run_ids is None else [r for r in all_runs if r["run_id"] in set(run_ids)]
    profiles = {r["run_id"]: default_profile(r["benchmark"]) for r in all_runs}
    scores: dict[str, dict[str, float]] = defaultdict(dict)
    for row in fetch(home, ScoreRow, "SELECT run_id, sample_id, scorer_profile, score FROM scores"):
        if profiles.get(row["run_id"]) == row["scorer_profile"] and row["score"] is not None:
            scores[row["run_id"]][row["sample_id"]] = float(row["score"])
    tokens = {r["run_id"]: int(r["tokens"] or 0) for r in fetch(
        home, RunTokensRow, f"SELECT u.run_id, sum(g.output_tokens) AS tokens FROM ({USED_GENERATIONS}) u "
                            "JOIN generations g ON g.gen_id = u.gen_id GROUP BY u.run_id")}
    headline = {r["run_id"]: (r["metric"], float(r["value"])) for r in fetch(home, HeadlineRow, HEADLINE)
                if profiles.get(r["run_id"]) == r["scorer_profile"]}
    missing = {r["run_id"]: (int(r["missing"]), int(r["used"])) for r in fetch(home, MissingRow, MISSING)
               if r["missing"]}
    return Store(home, runs, all_runs, dict(scores), tokens, headline, read_sample_sets(home, all_runs),
                 model_families(all_runs), missing)


# per run, the generations its routes name (each once) and how many of them the store no longer holds
MISSING = (f"SELECT u.run_id, count(DISTINCT u.gen_id) AS used, count(DISTINCT u.gen_id) FILTER (WHERE g.gen_id IS "
           f"NULL) AS missing FROM ({USED_GENERATIONS}) u LEFT JOIN (SELECT DISTINCT gen_id FROM generations) g "
           "ON g.gen_id = u.gen_id GROUP BY u.run_id")


# --- 2. table 10: routing funnel -------------------------------------------------------------------------------


# a cascade's baselines: outputs of its own stages computed for every sample, by runs of the same model(s)
BASELINES: dict[str, OutputKind] = {kind.baseline_name: kind for kind in (
    OUTPUT_KINDS[stage.label] for stage in (cascade.S_SMALL, cascade.R_SMALL, cascade.S_LARGE, cascade.RT_LARGE))}


def _baseline_of(cascade_run: RunRow, kind: OutputKind) -> Callable[[RunRow], bool]:
    def matches(run: RunRow) -> bool:
        return kind.stored_by(run) and all(role_model(run, role) == role_model(cascade_run, role)
                                           for role in kind.roles)
    return matches


ROUTE_COUNTS = "SELECT run_id, route, count(*) AS n FROM routes WHERE list_contains(?, run_id) GROUP BY ALL"


def routing_funnel(store: Store) -> Section:
    section = Section("routing-funnel", "Table 10 · Routing funnel: samples decided by MV1, MV2 and RT",
                      "As the paper's table 10, per comparison group: a row per cascade setting with how many samples "
                      "mutual verification 1 (small S = large S), mutual verification 2 (small R = large S) and "
                      "reasoning transfer decided, and the final score; a row whose MV1 + MV2 + RT + errors does not "
                      "add up to the run's samples is marked and footnoted. Then MAI against its baselines, each "
                      "the latest stored run of the setting over exactly the cascade's samples with the same models, "
                      "with MAI's paired difference and the exact McNemar test. A run's id is in its setting's "
                      "tooltip; a baseline that is not stored over these samples says so, as in table 7.")
    cascades = [r for r in store.runs if r["mode"] == "cascade"]
    if not cascades:
        section.notes.append("No cascade run in this report: `mai run` (mode cascade) stores one.")
        return section
    counts = {r["run_id"]: {label: 0 for label in COLORS} for r in cascades}
    for row in fetch(store.home, RouteCountRow, ROUTE_COUNTS, [[r["run_id"] for r in cascades]]):
        counts[row["run_id"]][row["route"]] = int(row["n"])
    everyone = store.groups(store.all_runs)
    for group, runs in store.groups(cascades).items():  # charts and table per comparison group, never across
        _funnel_group(store, section, group, runs, counts, everyone.get(group, []))
    return section


def _funnel_group(store: Store, section: Section, group: SampleSet, cascades: list[RunRow],
                  counts: dict[str, dict[str, int]], peers: list[RunRow]) -> None:
    """One comparison group's funnel chart and table (the paper's table 10: a row per setting, MV1 / MV2 / RT and
    the final score), and MAI against its baselines on the same samples (a chart and a table)."""
    funnel = figure()
    names = [f"{store.setting(r)} ({short(r['run_id'])}) n={r['n_samples']}" for r in cascades]
    for label in ("MV1", "MV2", "RT", "ERROR"):
        shares = [100 * counts[r["run_id"]][label] / r["n_samples"] for r in cascades]
        if not any(counts[r["run_id"]][label] for r in cascades):
            continue  # the legend lists only what is drawn
        funnel.add_trace(go.Bar(y=names, x=shares, name=label, orientation="h", marker_color=COLORS[label],
                                text=[str(counts[r["run_id"]][label]) for r in cascades], textposition="inside"))
    section.figures.append(layout(funnel, f"{group.label}: share of samples decided at each stage", group.key,
                                  barmode="stack", xaxis={"title": "% of samples", "range": [0, 100]},
                                  height=160 + 40 * len(cascades)))
    section.tables.append(_funnel_table(store, group, cascades, counts))
    _baselines(store, section, group, cascades, peers, names)


def _setting(store: Store, run: RunRow) -> Hover:
    """A run's row head as the paper names the setting, with what sets it apart from the group's other runs of it
    (`Store.setting`) and the name given with --name after it, its id in the tooltip."""
    name = f" ({given_name(run)})" if given_name(run) else ""
    return Hover(store.setting(run) + name, f"run {run['run_id']}")


def _funnel_table(store: Store, group: SampleSet, cascades: list[RunRow], counts: dict[str, dict[str, int]]
                  ) -> Table:
    pairs = {run_models(r) for r in cascades}
    errors = any(counts[r["run_id"]]["ERROR"] for r in cascades)
    table = Table(["setting", *(["model pair"] if len(pairs) > 1 else []), "MV1", "MV2", "RT",
                   *(["errors"] if errors else []), "final score %"], [],
                  f"{group_caption(group, cascades)}: samples decided at each stage (count, share) and the final "
                  "score (%, 95 % interval, n)", group=group.key, scored=("final score %",))
    for run in cascades:
        table.runs.append(run["run_id"])
        c, n = counts[run["run_id"]], run["n_samples"]
        total = c["MV1"] + c["MV2"] + c["RT"] + c["ERROR"]
        setting = _setting(store, run)
        if total != n:
            table.footnotes.append(f"{setting.text}: MV1 + MV2 + RT + errors = {total}, not the run's {n} samples.")
            setting = Hover(setting.text + mark(len(table.footnotes)), setting.title)
        mine = store.scored(run["run_id"])
        table.rows.append([setting, *([run_models(run)] if len(pairs) > 1 else []),
                           *(f"{c[k]} ({fixed(100 * c[k] / n, 1)} %)" for k in ("MV1", "MV2", "RT")),
                           *([c["ERROR"]] if errors else []),
                           score_cell(mine) if mine else table.noted(DASH, f"{setting.text}: not scored")])
        table.classes.append("" if total == n else "warning")
    return table


@dataclass(frozen=True)
class _Bar:
    """One bar of table 10's score chart: a mean score (%) with its 95 % interval and n."""

    value: float
    low: float
    high: float
    n: int


def _bar(scored: Scored | None) -> _Bar | None:
    if scored is None or not scored.scores:
        return None
    values = list(scored.scores.values())
    low, high = mean_interval(values)
    return _Bar(100 * sum(values) / len(values), 100 * low, 100 * high, len(values))


def _baselines(store: Store, section: Section, group: SampleSet, cascades: list[RunRow], peers: list[RunRow],
               names: list[str]) -> None:
    """MAI against each baseline over exactly its samples with the same models: a row per setting and baseline
    (its score, MAI's paired difference in points and the exact test), and a chart of the scores with their 95 %
    intervals on an axis from 0."""
    bars: dict[str, list[_Bar | None]] = {name: [] for name in ["MAI", *BASELINES]}
    table = Table(["setting", "baseline", "baseline score %", "MAI - baseline"], [],
                  f"{group_caption(group, cascades)}: MAI against its baselines, each the latest run of the setting "
                  "over exactly these samples with the same model(s); MAI - baseline in points on the same samples, "
                  "two-sided exact test", group=group.key, scored=("baseline score %",))
    for run in cascades:
        mine = store.scored(run["run_id"])
        table.runs.append(run["run_id"])  # MAI's side of every paired cell
        bars["MAI"].append(_bar(mine))
        for name, kind in BASELINES.items():
            matches = _baseline_of(run, kind)
            baseline = latest(peers, matches)
            theirs = store.scored(baseline["run_id"]) if baseline else None
            bars[name].append(_bar(theirs))
            if baseline is None or theirs is None:  # a dash, why in a footnote (once per reason and baseline)
                why = table.noted(DASH, f"{name}: {store.elsewhere(group, matches)}")
                table.rows.append([_setting(store, run), name, why, why])
                continue
            table.runs.append(baseline["run_id"])
            table.rows.append([_setting(store, run), Hover(name, f"run {baseline['run_id']}"), score_cell(theirs),
                               paired_cell(theirs, mine) if mine else table.noted(DASH, "MAI: not scored")])
    section.tables.append(table)
    compared = figure()
    for name, values in bars.items():
        if all(v is None for v in values):
            continue  # the legend lists only what is drawn
        compared.add_trace(go.Bar(
            x=names, y=[v.value if v else None for v in values], name=name,
            error_y={"type": "data", "symmetric": False, "array": [v.high - v.value if v else 0 for v in values],
                     "arrayminus": [v.value - v.low if v else 0 for v in values]},
            customdata=[[v.low, v.high, v.n] if v else [None] * 3 for v in values],
            hovertemplate=f"{name}: %{{y:.1f}} [%{{customdata[0]:.1f}}, %{{customdata[1]:.1f}}] "
                          "n=%{customdata[2]}<extra></extra>"))
    section.figures.append(layout(compared, f"{group.label}: final score vs the baselines on the same samples "
                                            "(bars: 95 % intervals)", group.key, barmode="group",
                                  xaxis={"title": "cascade run"},
                                  yaxis={"title": "mean score (%), axis from 0", "range": [0, 100]}))


# --- 3. tables 6 and 15: S2 -------------------------------------------------------------------------------------


CHANGED = """
    SELECT x.sample_id, x.category, x.final_answer AS without_s2, y.final_answer AS with_s2, x.reference,
           x.score AS score_without, y.score AS score_with, x.route AS route_without, y.route AS route_with
    FROM routes x JOIN routes y ON y.sample_id = x.sample_id
    WHERE x.run_id = ? AND y.run_id = ? AND x.final_answer IS DISTINCT FROM y.final_answer
    ORDER BY length(x.sample_id), x.sample_id
"""


_S2_PATTERN = {"without_s2": "", "with_s2": "/"}  # bars with S2 hatched


def s2_toggle(store: Store) -> Section:
    section = Section("s2", "S2 vs non-S2 on the same samples (tables 6, 15)",
                      "Pairs of runs that differ only in the S2 stage (the small model re-answers after its own "
                      "reasoning): single-model runs (table 6) and cascades (table 15, where S2 changes how often "
                      "MV2 settles a sample and how often RT is needed), with every sample whose answer changed.")
    pairs = [p for p in fetch(store.home, S2PairRow, load_saved("s2_vs_non_s2"))
             if p["run_without_s2"] in store.run_ids or p["run_with_s2"] in store.run_ids]
    by_group: dict[SampleSet, list[S2PairRow]] = defaultdict(list)
    for pair in pairs:  # both runs of a pair answered the same samples: one group
        by_group[store.sample_sets[pair["run_without_s2"]]].append(pair)
    for group, mine in sorted(by_group.items()):
        section.figures.append(_s2_figure(store, group, mine))
    children = {"single": section.child("table-6", "Table 6 · S2 for single models: the small model re-answers "
                                                   "after its own reasoning"),
                "cascade": section.child("table-15", "Table 15 · S2 in the cascade: MV2 and RT counts without "
                                                     "and with S2")}
    for group, runs in store.groups().items():  # table 6 in the paper's layout: models x S, E, E+S2, R, R+S2
        singles = [r for r in runs if r["mode"] == "single" and r["run_id"] in store.headline]
        if any(r["s2"] for r in singles):
            scores_grid(children["single"], group, singles, store.scored, missing=partial(store.elsewhere, group))
    for mode, part in children.items():
        mine = [p for p in pairs if (p["mode"] == "single") == (mode == "single")]
        if not mine:
            part.notes.append("No such pair in this report: " + (
                "<code>mai run --mode single --single-model small --single-prompt R --s2</code> next to the same run "
                "without <code>--s2</code>" if mode == "single" else
                "<code>mai run --s2</code> next to the same cascade without it") + ".")
            continue
        for group, pairs_of_group in sorted(by_group.items()):
            _s2_tables(store, part, group, [p for p in pairs_of_group if p in mine])
    return section


def _s2_tables(store: Store, section: Section, group: SampleSet, pairs: list[S2PairRow]) -> None:
    if not pairs:
        return
    ids = [r for p in pairs for r in (p["run_without_s2"], p["run_with_s2"])]
    section.tables.append(Table(
        ["mode", "models", "without S2", "with S2", "samples", "score without %", "score with %", "with vs without",
         "MV2 without", "MV2 with", "RT without", "RT with", "answers changed"],
        [[p["mode"], " + ".join(m for m in (p["large_model"], p["small_model"]) if m), p["run_without_s2"],
          p["run_with_s2"], p["common_samples"], *_s2_scores(store, p), p["mv2_without_s2"], p["mv2_with_s2"],
          p["rt_without_s2"], p["rt_with_s2"], p["answers_changed"]] for p in pairs],
        f"{group_caption(group, [r for r in store.all_runs if r['run_id'] in ids])}: headline score %, 95 % interval, n; with S2 against "
        "without on the same samples",
        group=group.key, runs=ids,
        scored=("score without %", "score with %")))
    for p in pairs:
        changed = fetch(store.home, S2ChangedRow, CHANGED, [p["run_without_s2"], p["run_with_s2"]])
        section.tables.append(Table(
            ["sample", "category", "answer without S2", "answer with S2", "reference", "score without",
             "score with", "route without", "route with"],
            [[c["sample_id"], c["category"], c["without_s2"], c["with_s2"], c["reference"], c["score_without"],
              c["score_with"], c["route_without"], c["route_with"]] for c in changed],
            f"Answers changed by S2: {p['run_without_s2']} -> {p['run_with_s2']} ({len(changed)})"))


def _s2_scores(store: Store, pair: S2PairRow) -> list[str | None]:
    """Both runs' score cells (headline, interval, n) and the paired test of with S2 against without."""
    without, with_s2 = store.scored(pair["run_without_s2"]), store.scored(pair["run_with_s2"])
    return [score_cell(without) if without else None, score_cell(with_s2) if with_s2 else None,
            paired_cell(without, with_s2) if without and with_s2 else None]


def _s2_figure(store: Store, group: SampleSet, pairs: list[S2PairRow]) -> go.Figure:
    """Routing counts and the headline score (table 15's) without and with S2."""
    fig = subplots(rows=1, cols=2, subplot_titles=("MV2 and RT counts", "headline score (%)"))
    labels = [f"{p['mode']} {short(p['run_without_s2'])} / {short(p['run_with_s2'])}" for p in pairs]
    counts = {("MV2", "without_s2"): [p["mv2_without_s2"] for p in pairs],
              ("MV2", "with_s2"): [p["mv2_with_s2"] for p in pairs],
              ("RT", "without_s2"): [p["rt_without_s2"] for p in pairs],
              ("RT", "with_s2"): [p["rt_with_s2"] for p in pairs]}
    for (name, suffix), values in counts.items():
        fig.add_trace(go.Bar(x=labels, y=values, name=f"{name} {suffix}", marker_color=COLORS[name],
                             marker_pattern_shape=_S2_PATTERN[suffix]), row=1, col=1)
    def headline(run_id: str, mean_score: float) -> float:  # the route rows' mean where a run has no headline
        return 100 * store.headline.get(run_id, ("", mean_score))[1]

    scores = {"without_s2": [headline(p["run_without_s2"], p["accuracy_without_s2"]) for p in pairs],
              "with_s2": [headline(p["run_with_s2"], p["accuracy_with_s2"]) for p in pairs]}
    for suffix, percents in scores.items():
        fig.add_trace(go.Bar(x=labels, y=percents, name=f"score {suffix}", marker_color="#457b9d",
                             marker_pattern_shape=_S2_PATTERN[suffix]), row=1, col=2)
    return layout(fig, f"{group.label}: S2 toggled, routing and score", group.key, barmode="group",
                  yaxis={"title": "samples"},
                  yaxis2={"title": "score (%)", "range": score_range([v for values in scores.values() for v in values])})
