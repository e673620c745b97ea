"""Paired comparison of two runs over the same samples: counts, an exact test, a bootstrap interval.

Pure functions over per-sample score pairs (a, b), a run A and a run B scoring the same sample:
- `better` = samples where B scores higher than A, `worse` = where B scores lower (the discordant pairs);
- two-sided exact test on the discordant pairs: under "no difference" each is better or worse with
  probability 1/2, so p = min(1, 2 * P(X <= min(better, worse))) for X ~ Binomial(better + worse, 1/2).
  For 0/1 scores this is McNemar's exact test; for graded scores (ANLS, relaxed match) it is the sign test
  on the samples whose score changed (ties dropped), and `test` says which;
- a percentile bootstrap interval of the mean difference (B - A): samples are resampled with replacement,
  pairs kept together, with a fixed seed so that a report is reproducible.
`mai.regression` uses the one-sided version of the same test as a CI gate; this module is for reading
results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from mai.regression import sign_test_p

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
# resample this many sample indices at a time: 10,000 resamples of 9,000 samples would hold 90 M indices
_CHUNK_CELLS = 2_000_000


def mcnemar_exact_p(better: int, worse: int) -> float:
    """Two-sided exact p-value over the discordant pairs (binomial, p = 1/2); 1.0 when there are none."""
    return min(1.0, 2 * sign_test_p(max(better, worse), min(better, worse)))  # P(X <= min) = P(X >= max)


def bootstrap_mean_diff_ci(diffs: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, level: float = 0.95,
                           seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile interval of the mean of `diffs` (per-sample B - A) under resampling of the samples."""
    values = np.asarray(diffs, dtype=np.float64)
    if values.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    per_chunk = max(1, _CHUNK_CELLS // values.size)
    for start in range(0, resamples, per_chunk):
        count = min(per_chunk, resamples - start)
        picks = rng.integers(0, values.size, size=(count, values.size))
        means[start:start + count] = values[picks].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(low), float(high))


def mean_interval(values: Sequence[float], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """An interval of the mean score of one run: Wilson's score interval for 0/1 scores (an accuracy), else the
    percentile bootstrap of the mean (graded scores: ANLS, relaxed accuracy)."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan)
    if all(v in (0.0, 1.0) for v in values):
        z = NormalDist().inv_cdf(1 - (1 - level) / 2)
        p = sum(values) / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))
    return bootstrap_mean_diff_ci(values, resamples, level, seed)  # the mean of the values themselves


@dataclass(frozen=True)
class PairedResult:
    subset: str
    n: int
    mean_a: float          # mean score of run A on the paired samples (fraction)
    mean_b: float
    better: int            # B scores higher than A
    worse: int             # B scores lower than A
    test: str              # "mcnemar-exact" (0/1 scores) or "sign" (graded scores)
    p_value: float         # two-sided
    ci_low: float          # bootstrap interval of mean_b - mean_a
    ci_high: float

    @property
    def difference(self) -> float:
        return self.mean_b - self.mean_a

    def as_dict(self) -> dict[str, object]:
        return {"subset": self.subset, "n": self.n, "mean_a": self.mean_a, "mean_b": self.mean_b,
                "difference": self.difference, "better": self.better, "worse": self.worse, "test": self.test,
                "p_value": self.p_value, "ci_low": self.ci_low, "ci_high": self.ci_high}


def compare_pairs(subset: str, pairs: Sequence[tuple[float, float]], resamples: int = BOOTSTRAP_RESAMPLES,
                  level: float = 0.95, seed: int = BOOTSTRAP_SEED) -> PairedResult:
    """`pairs` are (score of A, score of B) per shared sample."""
    n = len(pairs)
    better = sum(1 for a, b in pairs if b > a)
    worse = sum(1 for a, b in pairs if b < a)
    binary = all(a in (0.0, 1.0) and b in (0.0, 1.0) for a, b in pairs)
    low, high = bootstrap_mean_diff_ci([b - a for a, b in pairs], resamples, level, seed)
    return PairedResult(subset=subset, n=n, mean_a=sum(a for a, _ in pairs) / n if n else math.nan,
                        mean_b=sum(b for _, b in pairs) / n if n else math.nan, better=better, worse=worse,
                        test="mcnemar-exact" if binary else "sign", p_value=mcnemar_exact_p(better, worse),
                        ci_low=low, ci_high=high)
