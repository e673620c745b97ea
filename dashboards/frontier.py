"""The policy lab's cost-quality summary (RouteLLM's APGR): the Pareto frontier of the policies, each policy's
performance gap recovered (PGR) between a weak and a strong policy, and the area under the best PGR reachable
within a budget (a step function over the frontier: no mixing of policies is assumed).

The budget axis is fixed by definition, from the cost of one named policy to another's (the lab: small S alone to
large R alone), never by the cheapest and dearest policies present, so adding or dropping a policy moves the area
only through that policy's own PGR. A policy cheaper than the low end is reachable from budget 0; one dearer than
the high end is out of range. Without both ends there is no area."""

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
    budget: tuple[float, float] | None  # the budget axis's ends (the costs of the two policies that define it)


@dataclass(frozen=True)
class _Usable:
    name: str
    cost: float
    score: float
    baseline: bool


def frontier(points: Sequence[PolicyPoint], axis: CostAxis, weak: str, strong: str, oracle: str,
             budget: tuple[str, str]) -> Frontier:
    """The frontier of the available policies, the oracle aside, and the areas over the budget from the cost of
    `budget[0]` to that of `budget[1]` (module docstring)."""
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
    ends = (by_name.get(budget[0]), by_name.get(budget[1]))
    span = (ends[0].cost, ends[1].cost) if ends[0] and ends[1] and ends[1].cost > ends[0].cost else None
    return Frontier(names, pgr, _area(usable, pgr, span) if gap and span else None,
                    _area([p for p in usable if p.baseline], pgr, span) if gap and span else None,
                    pgr[found_oracle.name] if found_oracle else None, span)


def _area(policies: list[_Usable], pgr: dict[str, float | None], span: tuple[float, float]) -> float | None:
    """Area under the best PGR reachable at a normalised budget x in [0, 1] (a step function)."""
    low, high = span
    points = sorted((max(0.0, (p.cost - low) / (high - low)), pgr[p.name] or 0.0) for p in policies
                    if p.cost <= high)
    if not points:
        return None
    area, best = 0.0, None
    for (x, gained), following in zip(points, [x for x, _ in points[1:]] + [1.0]):
        best = gained if best is None else max(best, gained)
        area += best * (following - x)
    return area
