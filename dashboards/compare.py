"""`mai compare RUN_A RUN_B`: two stored runs, paired sample by sample, without re-running anything.

Pairs are the samples both runs scored (under one scorer profile, from the `scores` view) that hold the same
item in both runs' data (same content hash in `samples`: sample ids are row positions, so runs over other data
are never paired by id alone). For the pairs, overall and per category: each run's mean score, the samples B
does better and worse on, the two-sided exact test on those (McNemar's for 0/1 scores, the sign test for graded
ones) and a bootstrap 95 % interval of the difference (`mai.paired`); then output tokens of the generations each
run used on the paired samples, and the estimated time of each run under estimates that price the models they
share with the same latency profiles, whatever their names (equation 27; an estimate covers the run's samples,
which are the paired ones unless `unpaired` says otherwise); and what each run was made with (its provenance).
"""

from __future__ import annotations

from typing import TypedDict, cast

from mai.dashboards.provenance import Provenance, pair_estimates, read_estimates
from mai.dashboards.rounding import fixed
from mai.dashboards.views import USED_GENERATIONS, default_profile, fetch, run_label, run_models, session
from mai.errors import ConfigError
from mai.paired import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, compare_pairs
from mai.storage.paths import Home
from mai.storage.rows import RunRow
from mai.types import Route

SCORED = """
    SELECT sc.sample_id, sc.score, r.category, r.route, s.content_hash
    FROM scores sc
    JOIN routes r ON r.run_id = sc.run_id AND r.sample_id = sc.sample_id
    JOIN runs ru ON ru.run_id = sc.run_id
    LEFT JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = sc.sample_id
    WHERE sc.run_id = ? AND sc.scorer_profile = ?
"""
TOKENS = f"""
    SELECT u.sample_id, sum(g.output_tokens) AS output_tokens, count(*) AS calls
    FROM ({USED_GENERATIONS}) u JOIN generations g ON g.gen_id = u.gen_id
    WHERE u.run_id = ? GROUP BY u.sample_id
"""


class ScoredRow(TypedDict):
    sample_id: str
    score: float | None
    category: str
    route: Route
    content_hash: str | None


class TokensRow(TypedDict):
    sample_id: str
    output_tokens: int
    calls: int



# --- the result: JSON-ready records (`mai compare --json`, mai.api.compare) ------------------------------


class RunDescription(TypedDict):
    run_id: str
    label: str
    models: str
    run_name: str | None
    benchmark: str
    n_samples: int
    provenance: str


class Unpaired(TypedDict):
    only_a: int        # scored samples only run A holds
    only_b: int
    other_items: int   # the same sample id holding another item (other data) in the two runs


class Bootstrap(TypedDict):
    resamples: int
    seed: int
    level: float


class SubsetComparison(TypedDict):
    """`mai.paired.PairedResult` of one subset ("overall", "category=...")."""

    subset: str
    n: int
    mean_a: float
    mean_b: float
    difference: float
    better: int
    worse: int
    test: str
    p_value: float
    ci_low: float
    ci_high: float


class ChangedSample(TypedDict):
    sample_id: str
    category: str
    score_a: float
    score_b: float
    route_a: Route
    route_b: Route


class EstimatePair(TypedDict):
    """Run A's estimate `estimate_name` and run B's `estimate_b`, which price the models both runs used alike
    (`prices`: those models and their profiles)."""

    estimate_name: str
    estimate_b: str
    prices: str
    seconds_a: float
    seconds_b: float
    difference_s: float
    ratio: float | None


class Cost(TypedDict):
    output_tokens_a: int
    output_tokens_b: int
    output_tokens_difference: int
    mean_output_tokens_a: float
    mean_output_tokens_b: float
    calls_a: int
    calls_b: int
    estimates: list[EstimatePair]


class Comparison(TypedDict):
    run_a: RunDescription
    run_b: RunDescription
    scorer_profile: str
    paired: int
    unpaired: Unpaired
    bootstrap: Bootstrap
    comparisons: list[SubsetComparison]
    changed: list[ChangedSample]
    cost: Cost


def read_run(home: Home, run_id: str) -> RunRow:
    found = fetch(home, RunRow, "SELECT * FROM runs WHERE run_id = ?", [run_id])
    if not found:
        raise ConfigError(f"no completed run '{run_id}' in {home.root} (see `mai sql \"SELECT run_id FROM runs\"`)")
    return found[0]


def compare_runs(home: Home, run_a: str, run_b: str, profile: str | None = None,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Comparison:
    """The paired comparison of run B against run A (differences are B - A), as plain values (JSON-ready)."""
    with session(home):
        a, b = read_run(home, run_a), read_run(home, run_b)
        if a["benchmark"] != b["benchmark"]:
            raise ConfigError(f"runs {run_a} ({a['benchmark']}) and {run_b} ({b['benchmark']}) are on different "
                              "benchmarks: there are no shared samples to pair")
        chosen = profile or default_profile(a["benchmark"])
        scores_a, scores_b = _scores(home, run_a, chosen), _scores(home, run_b, chosen)
        shared = scores_a.keys() & scores_b.keys()
        paired = sorted(sid for sid in shared if scores_a[sid]["content_hash"] == scores_b[sid]["content_hash"])
        if not paired:
            raise ConfigError(f"runs {run_a} and {run_b} share no scored sample under profile '{chosen}'")
        groups: dict[str, list[tuple[float, float]]] = {"overall": []}
        for sid in paired:
            pair = (_score(scores_a[sid]), _score(scores_b[sid]))
            groups["overall"].append(pair)
            groups.setdefault(f"category={scores_a[sid]['category']}", []).append(pair)
        results = [cast(SubsetComparison, compare_pairs(subset, groups[subset], resamples, seed=seed).as_dict())
                   for subset in sorted(groups, key=lambda name: (name != "overall", name))]
        return {
            "run_a": _describe(a), "run_b": _describe(b), "scorer_profile": chosen, "paired": len(paired),
            "unpaired": {"only_a": len(scores_a.keys() - scores_b.keys()), "only_b": len(scores_b.keys() - scores_a.keys()),
                         "other_items": len(shared) - len(paired)},
            "bootstrap": {"resamples": resamples, "seed": seed, "level": 0.95},
            "comparisons": results,
            "changed": [{"sample_id": sid, "category": scores_a[sid]["category"], "score_a": _score(scores_a[sid]),
                         "score_b": _score(scores_b[sid]), "route_a": scores_a[sid]["route"],
                         "route_b": scores_b[sid]["route"]}
                        for sid in paired if scores_a[sid]["score"] != scores_b[sid]["score"]],
            "cost": _costs(home, run_a, run_b, paired),
        }


def _scores(home: Home, run_id: str, profile: str) -> dict[str, ScoredRow]:
    """The run's scored samples (a sample without a score is not paired)."""
    return {row["sample_id"]: row for row in fetch(home, ScoredRow, SCORED, [run_id, profile])
            if row["score"] is not None}


def _score(row: ScoredRow) -> float:
    return float(row["score"] or 0.0)  # set: `_scores` keeps only scored samples


def _describe(run: RunRow) -> RunDescription:
    return {"run_id": run["run_id"], "label": run_label(run), "models": run_models(run), "run_name": run["run_name"],
            "benchmark": run["benchmark"], "n_samples": run["n_samples"], "provenance": Provenance.of(run).line()}


def _costs(home: Home, run_a: str, run_b: str, paired: list[str]) -> Cost:
    keep = set(paired)
    tokens = []
    for run_id in (run_a, run_b):
        used = [row for row in fetch(home, TokensRow, TOKENS, [run_id]) if row["sample_id"] in keep]
        tokens.append((sum(int(r["output_tokens"]) for r in used), sum(int(r["calls"]) for r in used)))
    (tokens_a, calls_a), (tokens_b, calls_b) = tokens
    estimates: list[EstimatePair] = [
        {"estimate_name": a.name, "estimate_b": b.name, "prices": a.shared_with(b),
         "seconds_a": a.total_s, "seconds_b": b.total_s, "difference_s": b.total_s - a.total_s,
         "ratio": b.total_s / a.total_s if a.total_s else None}
        for a, b in pair_estimates(read_estimates(home, [run_a]), read_estimates(home, [run_b]))]
    n = len(paired)
    return {"output_tokens_a": tokens_a, "output_tokens_b": tokens_b, "output_tokens_difference": tokens_b - tokens_a,
            "mean_output_tokens_a": tokens_a / n, "mean_output_tokens_b": tokens_b / n,
            "calls_a": calls_a, "calls_b": calls_b, "estimates": estimates}


def render_text(result: Comparison) -> str:
    """The comparison as the few lines and the table `mai compare` prints."""
    a, b = result["run_a"], result["run_b"]
    lines = [f"A = {a['run_id']} ({a['label']}, {a['models']})", f"    {a['provenance']}",
             f"B = {b['run_id']} ({b['label']}, {b['models']})", f"    {b['provenance']}",
             (f"{result['paired']} paired samples (scorer profile {result['scorer_profile']}); not paired: "
             f"{result['unpaired']['only_a']} only in A, {result['unpaired']['only_b']} only in B, "
             f"{result['unpaired']['other_items']} other items under the same id"), "",
             (f"{'subset':28s} {'n':>5s} {'A %':>7s} {'B %':>7s} {'B-A':>7s} {'95% CI (points)':>17s} {'better':>6s} "
             f"{'worse':>6s} {'p':>8s}  test")]
    for c in result["comparisons"]:
        interval = f"[{fixed(100 * c['ci_low'], 1, sign=True)}, {fixed(100 * c['ci_high'], 1, sign=True)}]"
        lines.append(f"{c['subset']:28s} {c['n']:5d} {100 * c['mean_a']:7.1f} {100 * c['mean_b']:7.1f} "
                     f"{100 * c['difference']:+7.1f} {interval:>17s} {c['better']:6d} {c['worse']:6d} "
                     f"{c['p_value']:8.3g}  {c['test']}")
    cost = result["cost"]
    lines += ["", (f"output tokens on the paired samples: A {cost['output_tokens_a']} "
                  f"({fixed(cost['mean_output_tokens_a'], 1)}/sample, {cost['calls_a']} calls), "
                  f"B {cost['output_tokens_b']} "
                  f"({fixed(cost['mean_output_tokens_b'], 1)}/sample, {cost['calls_b']} calls)")]
    lines += [f"estimated time (A {e['estimate_name']}, B {e['estimate_b']}: {e['prices']}): "
              f"A {fixed(e['seconds_a'], 2)} s, "
              f"B {fixed(e['seconds_b'], 2)} s ({fixed(e['difference_s'], 2, sign=True)} s)" for e in cost["estimates"]]
    if not cost["estimates"]:
        lines.append("estimated time: no pair of estimates prices the runs' shared models with the same profiles "
                     "(`mai estimate RUN --small-profile P --large-profile Q` for each run)")
    return "\n".join(lines)
