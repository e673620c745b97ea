"""Regression check: is a candidate run significantly worse than a baseline run on the same samples?

Paired, per sample: for every sample both runs scored, the score either went down, up, or stayed. A drop is
a regression only when it is both large enough (`min_drop_points` of the metric, in points) and unlikely by
chance: a one-sided sign test on the samples that changed (McNemar's exact test when scores are 0/1) gives
p < `alpha`. Checked overall and per category, so a family that collapses is caught even when the overall
number hides it (per-category checks use the same thresholds on fewer samples, so only real drops pass
the test). A sample the baseline scored and the candidate holds as an error fails the check on its own. A
baseline sample the candidate did not run at all (a `--limit`, a subset) is left out of the comparison, which is
over the shared samples, and reported as a warning, unless `require_all` makes every absent sample fail the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mai.errors import ConfigError

# sample_id -> (category, score); a score of None is a sample that errored
SampleScores = dict[str, tuple[str, float | None]]


@dataclass(frozen=True)
class Comparison:
    subset: str
    n: int
    baseline: float       # mean score on the paired samples, in points (0-100)
    candidate: float
    worse: int            # samples whose score went down
    better: int           # samples whose score went up
    p_value: float        # one-sided sign test: P(at least `worse` of `worse + better` by chance)
    regressed: bool

    @property
    def drop_points(self) -> float:
        return self.baseline - self.candidate


@dataclass(frozen=True)
class Verdict:
    comparisons: tuple[Comparison, ...]
    missing: tuple[str, ...]  # baseline samples without a candidate score: `errored` + `absent`
    errored: tuple[str, ...] = ()  # the candidate ran them and they are errors
    absent: tuple[str, ...] = ()   # the candidate did not run them (a smaller --limit, another subset)
    require_all: bool = False      # absent samples fail the check too

    @property
    def regressed(self) -> bool:
        return (bool(self.errored) or (self.require_all and bool(self.absent))
                or any(c.regressed for c in self.comparisons))


def sign_test_p(worse: int, better: int) -> float:
    """P(X >= worse) for X ~ Binomial(worse + better, 1/2): exact, no normal approximation."""
    n = worse + better
    if n == 0:
        return 1.0
    # `1 << n`, not `2**n`: an int power is typed Any (a negative exponent gives a float)
    return sum(math.comb(n, k) for k in range(worse, n + 1)) / (1 << n)


def compare_subset(subset: str, pairs: list[tuple[float, float]], min_drop_points: float, alpha: float
                   ) -> Comparison:
    n = len(pairs)
    baseline = 100 * sum(b for b, _ in pairs) / n if n else 0.0
    candidate = 100 * sum(c for _, c in pairs) / n if n else 0.0
    worse = sum(1 for b, c in pairs if c < b)
    better = sum(1 for b, c in pairs if c > b)
    p_value = sign_test_p(worse, better)
    regressed = baseline - candidate >= min_drop_points and p_value < alpha
    return Comparison(subset, n, baseline, candidate, worse, better, p_value, regressed)


def compare_runs(baseline: SampleScores, candidate: SampleScores, min_drop_points: float = 1.0,
                 alpha: float = 0.05, require_all: bool = False) -> Verdict:
    """Overall and per-category paired comparisons over the samples both runs scored."""
    scored = {sid: (category, score) for sid, (category, score) in baseline.items() if score is not None}
    missing = tuple(sorted(sid for sid in scored if candidate.get(sid, ("", None))[1] is None))
    absent = tuple(sid for sid in missing if sid not in candidate)
    errored = tuple(sid for sid in missing if sid in candidate)
    groups: dict[str, list[tuple[float, float]]] = {"overall": []}
    for sid, (category, score) in sorted(scored.items()):
        other = candidate.get(sid, ("", None))[1]
        if score is None or other is None:
            continue
        groups["overall"].append((score, other))
        groups.setdefault(f"category={category}", []).append((score, other))
    comparisons = tuple(compare_subset(subset, pairs, min_drop_points, alpha) for subset, pairs in groups.items())
    return Verdict(comparisons, missing, errored, absent, require_all)


def check_same_items(baseline_name: str, baseline: dict[str, str], candidate: dict[str, str]) -> None:
    """Sample ids are row positions: the same id over other data (a regenerated benchmark, another dataset
    revision) is another item, and pairing it would compare nothing. Refuse, saying what to do."""
    changed = sorted(sid for sid, content in baseline.items() if sid in candidate and candidate[sid] != content)
    if changed:
        raise ConfigError(
            f"{len(changed)} samples of baseline {baseline_name} hold other items in this run's data "
            f"(e.g. {', '.join(changed[:5])}): the benchmark's data changed since the baseline was written. "
            "Write a new baseline from a run on the current data (`mai baseline RUN_ID --out FILE`).")
