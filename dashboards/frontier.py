"""The policy lab's cost-quality summary (RouteLLM's APGR): the Pareto frontier of the policies, each policy's
performance gap recovered (PGR) between a weak and a strong policy, and the area under the best PGR reachable
within a budget, the budget normalised from the cheapest to the dearest policy (a step function over the
frontier: no mixing of policies is assumed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

CostAxis = Literal["seconds", "mean_output_tokens"]


@dataclass(frozen=True)
class PolicyPoint:
    """One policy over a split: whether it answered every sample, its mean score and its costs."""

    name: str
    available: bool
    baseline: bool                   # one stored output for every sample
    mean_score: float | None
    seconds: float | None            # with latency profiles
    mean_output_tokens: float | None

    def cost(self, axis: CostAxis) -> float | None:
        return self.seconds if axis == "seconds" else self.mean_output_tokens


@dataclass(frozen=True)
class Frontier:
    names: list[str]                 # the Pareto frontier, cheapest first
    pgr: dict[str, float | None]     # every policy's PGR (None without a gap between weak and strong)
    apgr: float | None               # the area over every policy but the oracle
    apgr_baselines: float | None     # ... over the single-output baselines only
    oracle_pgr: float | None


@dataclass(frozen=True)
class _Usable:
    name: str
    cost: float
    score: float
    baseline: bool


def frontier(points: Sequence[PolicyPoint], axis: CostAxis, weak: str, strong: str, oracle: str) -> Frontier:
    """The frontier of the available policies, the oracle aside, and the areas (module docstring)."""
    usable = [_Usable(p.name, cost, p.mean_score, p.baseline) for p in points
              if p.available and p.name != oracle and p.mean_score is not None and (cost := p.cost(axis)) is not None]
    names: list[str] = []
    best = None
    for p in sorted(usable, key=lambda p: (p.cost, -p.score, p.name)):
        if best is None or p.score > best:
            names.append(p.name)
            best = p.score
    by_name = {p.name: p for p in usable}
    low, high = by_name.get(weak), by_name.get(strong)
    gap = (high.score - low.score) if low and high else 0.0
    pgr = {p.name: (p.mean_score - low.score) / gap if gap and low and p.mean_score is not None else None
           for p in points}
    found_oracle = next((p for p in points if p.name == oracle and p.available), None)
    return Frontier(names, pgr, _area(usable, pgr) if gap else None,
                    _area([p for p in usable if p.baseline], pgr) if gap else None,
                    pgr[found_oracle.name] if found_oracle else None)


def _area(policies: list[_Usable], pgr: dict[str, float | None]) -> float | None:
    """Area under the best PGR reachable at a normalised budget x in [0, 1] (a step function)."""
    if not policies:
        return None
    costs = [p.cost for p in policies]
    low, high = min(costs), max(costs)
    points = sorted(((p.cost - low) / (high - low) if high > low else 0.0, pgr[p.name] or 0.0) for p in policies)
    area, best = 0.0, None
    for (x, gained), following in zip(points, [x for x, _ in points[1:]] + [1.0]):
        best = gained if best is None else max(best, gained)
        area += best * (following - x)
    return area
