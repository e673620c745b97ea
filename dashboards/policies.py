"""The routing-policy lab: what other routing policies would have given, from stored outputs, with no model.

For a benchmark split and a model pair ("a group": same data, models, revisions, dtype and token budgets), every
stored per-sample output of the group's runs is collected once: small S, large S, small R, small R+S2, large R,
RT (the large model reading the small model's full reasoning), E where stored (the kinds of
`mai.dashboards.outputs`, named by the stage table). Each output is scored under one scorer profile and priced
(output tokens, calls of each model, and, with a latency profile per model, the equation-27 seconds of
`mai.latency_estimate`). Policies then combine them per sample:

  one output alone   small S, large S, small R, small R+S2, large R, Full RT (small R then RT), ...
  MV1 -> small R     MV1 (small S vs large S); on disagreement the small model's reasoned answer (what MV1 + MV2
                     give without RT: MV2 agreement returns the same answer)
  MV1 -> RT          MV1; on disagreement straight to reasoning transfer (no MV2)
  cascade, +S2       MV1 -> small R (+S2) -> MV2 -> RT: `mai.cascade.route`, the function the runs route with, so
                     the lab's cascade equals a stored cascade run over the same outputs
  oracle             per sample the cheapest stored answer with the best score (an upper bound: every policy's
                     answer is one of the candidates, so its mean score is >= every policy's)

A policy needing an output that is not stored for every sample is listed as missing, with the `mai run`
command that computes it. The cost-quality summary follows RouteLLM's APGR: quality as the performance gap
recovered between the small model's and the large model's S answers, PGR = (q - q(small S)) / (q(large S) -
q(small S)), and the area under the best PGR reachable within a budget (a step function over the Pareto frontier:
no mixing of policies is assumed), the budget axis fixed by definition from the cost of small S alone to that of
large R alone (`BUDGET`), so the area does not move when a policy outside the frontier comes or goes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from mai import cascade
from mai.config import DEFAULT_MAX_NEW_TOKENS
from mai.dashboards.charts import num
from mai.dashboards.frontier import CostAxis, Frontier, PolicyPoint, frontier
from mai.dashboards.outputs import OUTPUT_KINDS, ROLES, OutputKind, kind_order
from mai.dashboards.policy_store import (
    Group,
    Output,
    Pricing,
    SampleOutputs,
    config_revision,
    count_errors,
    find_groups,
    read_latency,
    read_outputs,
    read_samples,
    stored_config,
)
from mai.dashboards.rounding import fixed
from mai.dashboards.views import default_profile, run_label, session
from mai.errors import ConfigError
from mai.evals.base import Benchmark, ScoredSample
from mai.evals.registry import get_benchmark
from mai.paired import mean_interval
from mai.storage.paths import Home
from mai.types import Role, Route, Sample, StageAnswer, StageName, StageSpec

__all__ = ["Group", "find_groups", "policy_lab", "policy_labs", "render_text"]

ORACLE = "oracle"
ANY_OUTPUT = "any output"  # what the oracle misses on a sample with no stored output at all


@dataclass
class Tally:
    scored: list[ScoredSample] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    calls: dict[Role, int] = field(default_factory=lambda: {"small": 0, "large": 0})
    seconds: float = 0.0
    routes: dict[str, int] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    missing_samples: int = 0

    def add(self, sample: Sample, final: Output, used: Sequence[Output], route: str | None) -> None:
        self.scored.append(ScoredSample(sample, final.answer, final.score))
        for output in used:
            self.output_tokens += output.output_tokens
            self.prompt_tokens += output.prompt_tokens
            self.calls[output.role] += 1
            self.seconds += output.seconds or 0.0
        if route:
            self.routes[route] = self.routes.get(route, 0) + 1


# a policy maps one sample's stored outputs to (final output, outputs it used, route label), or to the kinds
# it would need that are not stored
Decision = tuple[Output, list[Output], str | None]
Policy = Callable[[Sample, SampleOutputs, Benchmark], "Decision | list[str]"]

CASCADE = cascade.stages_for("cascade", False)
MV1_STAGES = cascade.stage_groups(CASCADE)[0]  # the two S answers mutual verification 1 compares
LARGE_S, SMALL_S = cascade.S_LARGE.label, cascade.S_SMALL.label


def chain(outputs: SampleOutputs, kind: str) -> tuple[list[Output], list[str]]:
    """The output and everything upstream of it, and the kinds of those that are not stored."""
    kinds = [kind]
    while (consumed := OUTPUT_KINDS[kinds[-1]].consumes) is not None:
        kinds.append(consumed)
    return [outputs[k] for k in kinds if k in outputs], [k for k in kinds if k not in outputs]


def alone(kind: str) -> Policy:
    def decide(sample: Sample, outputs: SampleOutputs, benchmark: Benchmark) -> Decision | list[str]:
        used, missing = chain(outputs, kind)
        return missing or (used[0], used, None)
    return decide


def mv1_then(fallback: str) -> Policy:
    def decide(sample: Sample, outputs: SampleOutputs, benchmark: Benchmark) -> Decision | list[str]:
        missing = [stage.label for stage in MV1_STAGES if stage.label not in outputs]
        if missing:
            return missing
        large, small = outputs[LARGE_S], outputs[SMALL_S]
        if benchmark.agree(large.answer, small.answer, sample):
            return large, [large, small], "MV1"
        used, missing = chain(outputs, fallback)
        return missing or (used[0], [large, small, *used], "fallback")
    return decide


def _stages_used(stages: Sequence[StageSpec], route: Route) -> list[StageSpec]:
    """The stages whose outputs a cascade route consumed: MV1 the two S answers, MV2 also the small model's
    reasoning (and S2), RT every stage."""
    if route == "MV1":
        return cascade.stage_groups(stages)[0]
    return [stage for stage in stages if route == "RT" or stage.prompt_kind != "RT"]


def full_cascade(s2: bool) -> Policy:
    """`mai.cascade.route` over the stored outputs; the outputs a route used follow from its label."""
    stages = cascade.stages_for("cascade", s2)

    def decide(sample: Sample, outputs: SampleOutputs, benchmark: Benchmark) -> Decision | list[str]:
        # a stage key with no entry for the sample reads as "not answered", as in a run
        answers: dict[StageName, dict[str, StageAnswer]] = {
            stage.name: ({sample.sample_id: StageAnswer(outputs[stage.label].gen_id, outputs[stage.label].text,
                                                        outputs[stage.label].answer)}
                         if stage.label in outputs else {}) for stage in stages}
        decision = cascade.route(sample, "cascade", answers, benchmark)
        kinds = [stage.label for stage in _stages_used(stages, decision.route)]
        missing = [k for k in kinds if k not in outputs]
        if missing:
            return missing
        used = [outputs[k] for k in kinds]
        final = next(o for o in used if o.gen_id == decision.final_gen_id)
        return final, used, decision.route
    return decide


def oracle(cost: Callable[[Sequence[Output]], float], kinds: Sequence[str]) -> Policy:
    """Per sample: the best score any of `kinds` (every kind the group stores) reaches, at the lowest cost of an
    output reaching it; only on the samples where every one of them is stored, so that the bound is over the same
    candidates on every sample (its n says on how many)."""
    def decide(sample: Sample, outputs: SampleOutputs, benchmark: Benchmark) -> Decision | list[str]:
        found = [chain(outputs, kind) for kind in kinds]
        missing = sorted({k for _, absent in found for k in absent})
        if missing or not found:
            return missing or [ANY_OUTPUT]
        best = min((used for used, _ in found),
                   key=lambda c: (-c[0].score, cost(c), sum(o.role == "large" for o in c), c[0].kind))
        return best[0], best, best[0].kind
    return decide


def evaluate(policy: Policy, samples: Sequence[Sample], outputs: dict[str, dict[str, Output]],
             benchmark: Benchmark) -> Tally:
    tally = Tally()
    for sample in samples:
        result = policy(sample, outputs.get(sample.sample_id, {}), benchmark)
        if isinstance(result, list):
            tally.missing_samples += 1
            for kind in result:
                tally.missing[kind] = tally.missing.get(kind, 0) + 1
            continue
        tally.add(sample, *result)
    return tally


@dataclass(frozen=True)
class NamedPolicy:
    name: str
    description: str
    decide: Policy
    baseline: bool = False  # one stored output for every sample (the APGR baselines)


def alone_name(kind: OutputKind) -> str:
    return kind.baseline_name if kind.mode == "full_rt" else f"{kind.label} alone"


WEAK, STRONG = alone_name(OUTPUT_KINDS[SMALL_S]), alone_name(OUTPUT_KINDS[LARGE_S])
# the APGR-style area's budget axis, by definition: from the small model's S answers to the large model's R
BUDGET = (WEAK, alone_name(OUTPUT_KINDS["large R"]))


def _describe(kind: OutputKind) -> str:
    if kind.mode == "full_rt":
        return f"{kind.consumes}, then the {kind.role} model reads it ({kind.label}) for every sample"
    return f"the {kind.role} model's {kind.answer} answer for every sample"


def named_policies(kinds: Sequence[str], cost: Callable[[Sequence[Output]], float]) -> list[NamedPolicy]:
    """Each stored kind alone, then the combinations (module docstring)."""
    small_r, rt = cascade.R_SMALL.label, cascade.RT_LARGE.label
    return [
        *(NamedPolicy(alone_name(OUTPUT_KINDS[kind]), _describe(OUTPUT_KINDS[kind]), alone(kind), baseline=True)
          for kind in kinds),
        NamedPolicy(f"MV1 -> {small_r}", "MV1; on disagreement the small model's reasoned answer (MV1 + MV2 without "
                    "RT)", mv1_then(small_r)),
        NamedPolicy(f"MV1 -> {rt}", "MV1; on disagreement reasoning transfer at once (no MV2)", mv1_then(rt)),
        NamedPolicy("cascade", "MV1 -> small R -> MV2 -> RT (the paper's MAI)", full_cascade(False)),
        NamedPolicy("cascade +S2", "MV1 -> small R + S2 -> MV2 -> RT", full_cascade(True)),
        NamedPolicy(ORACLE, "per sample the cheapest stored answer with the best score, on the samples where every "
                    "stored kind is stored", oracle(cost, kinds)),
    ]


# --- the lab's result: JSON-ready records (`mai policies --json`, mai.api.policies) -----------------------


class PolicyRecord(TypedDict):
    name: str
    description: str
    available: bool            # stored for every sample
    n: int                     # samples it answered
    missing_samples: int
    missing_outputs: dict[str, int]  # kind -> samples missing it
    mean_score: float | None
    score_interval: list[float] | None  # the mean score's 95 % interval (mai.paired.mean_interval) over the n samples
    metric: str | None         # the benchmark's headline metric and its value over the answered samples
    metric_value: float | None
    output_tokens: int
    mean_output_tokens: float | None
    prompt_tokens: int
    small_calls: int
    large_calls: int
    seconds: float | None      # equation-27 seconds, with latency profiles
    routes: dict[str, int]
    commands: list[str]        # the `mai run`s that store what is missing
    pgr: float | None
    pareto: bool


class SummaryRecord(TypedDict):
    frontier: list[str]
    weak: str
    strong: str
    apgr: float | None
    apgr_baselines: float | None
    oracle_pgr: float | None
    budget: list[str]                 # the two policies whose costs are the budget axis's ends
    budget_range: list[float] | None  # their costs (None where either is not stored)


class RunRef(TypedDict):
    run_id: str
    label: str


class LabRecord(TypedDict):
    benchmark: str
    group: str                 # the comparison group in words (mai.dashboards.groups.SampleSet.label)
    group_key: str
    group_hashes: str          # the data fingerprint and the md5 of the sorted sample ids
    dataset_fingerprint: str
    small_model: str
    large_model: str
    dtype: str
    budgets: dict[str, int]
    scorer_profile: str
    runs: list[RunRef]
    samples: int
    errors: int
    conflicting_outputs: int
    latency_profiles: dict[Role, str] | None
    latency_profile_choices: dict[Role, list[str]] | None
    cost_axis: CostAxis
    policies: list[PolicyRecord]
    summary: SummaryRecord


def policy_labs(home: Home, benchmark: str | None = None, small_model: str | None = None,
                large_model: str | None = None, dataset: str | None = None, profile: str | None = None,
                small_profile: str | None = None, large_profile: str | None = None) -> list[LabRecord]:
    """One lab per group of stored runs that match (see `find_groups`)."""
    with session(home):
        groups = find_groups(home, benchmark, small_model, large_model, dataset)
        if not groups:
            raise ConfigError("no stored cascade or Full RT run matches: a policy lab needs a model pair's run "
                              f"(benchmark={benchmark}, small={small_model}, large={large_model}, dataset={dataset})")
        return [policy_lab(home, group, profile, small_profile, large_profile) for group in groups]


def policy_lab(home: Home, group: Group, profile: str | None = None, small_profile: str | None = None,
               large_profile: str | None = None) -> LabRecord:
    benchmark = get_benchmark(group.benchmark)
    chosen = profile or default_profile(group.benchmark)
    if chosen not in benchmark.profiles:
        raise ConfigError(f"benchmark '{benchmark.name}' has no scorer profile '{chosen}': "
                          f"choose one of {list(benchmark.profiles)}")
    latency = read_latency(home, group, small_profile, large_profile)
    samples = read_samples(home, group)
    outputs, conflicts = read_outputs(home, group, samples, Pricing(benchmark, chosen, latency.profiles))
    by_seconds = bool(latency.profiles)

    def cost(used: Sequence[Output]) -> float:
        return sum((o.seconds or 0.0) if by_seconds else o.output_tokens for o in used)

    kinds = sorted({kind for held in outputs.values() for kind in held}, key=kind_order)
    points = [_point(named, evaluate(named.decide, samples, outputs, benchmark), len(samples), benchmark, chosen,
                     by_seconds) for named in named_policies(kinds, cost)]
    cost_axis: CostAxis = "seconds" if by_seconds else "mean_output_tokens"
    found = frontier([p.point for p in points], cost_axis, WEAK, STRONG, ORACLE, BUDGET)
    sample_set = group.sample_set
    return {"benchmark": group.benchmark, "group": sample_set.label if sample_set else group.benchmark,
            "group_key": sample_set.key if sample_set else "", "group_hashes": sample_set.hashes if sample_set else "",
            "dataset_fingerprint": group.dataset_fingerprint,
            "small_model": group.small_model, "large_model": group.large_model, "dtype": group.dtype,
            "budgets": dict(group.budgets), "scorer_profile": chosen,
            "runs": [{"run_id": r["run_id"], "label": run_label(r)} for r in group.runs],
            "samples": len(samples), "errors": count_errors(home, group), "conflicting_outputs": conflicts,
            "latency_profiles": {role: p.name for role, p in latency.profiles.items()} or None,
            "latency_profile_choices": latency.choices or None, "cost_axis": cost_axis,
            "policies": [_record(point, group, found) for point in points],
            "summary": {"frontier": found.names, "weak": WEAK, "strong": STRONG, "apgr": found.apgr,
                        "apgr_baselines": found.apgr_baselines, "oracle_pgr": found.oracle_pgr,
                        "budget": list(BUDGET), "budget_range": list(found.budget) if found.budget else None}}


@dataclass(frozen=True)
class _Point:
    """One policy evaluated over the split (what `PolicyPoint` the frontier needs, and what its record shows)."""

    policy: NamedPolicy
    tally: Tally
    point: PolicyPoint
    metric: str | None
    metric_value: float | None


HIDDEN_METRICS = ("unparsed_rate", "yes_ratio", "precision", "recall", "row_accuracy")


def _point(named: NamedPolicy, tally: Tally, n_samples: int, benchmark: Benchmark, profile: str,
           by_seconds: bool) -> _Point:
    n = len(tally.scored)
    metrics = benchmark.aggregate(tally.scored, profile) if n else []
    headline = sorted((m for m in metrics if m.subset == "overall" and m.name not in HIDDEN_METRICS),
                      key=lambda m: (m.name != "f1", m.name))
    point = PolicyPoint(named.name, n == n_samples and n > 0, named.baseline,
                        sum(s.score for s in tally.scored) / n if n else None,
                        tally.seconds if by_seconds else None, tally.output_tokens / n if n else None)
    return _Point(named, tally, point, headline[0].name if headline else None,
                  headline[0].value if headline else None)


def _record(evaluated: _Point, group: Group, found: Frontier) -> PolicyRecord:
    tally, point = evaluated.tally, evaluated.point
    missing = set(tally.missing) - {ANY_OUTPUT}
    covered = {OUTPUT_KINDS[kind].consumes for kind in missing}  # a run storing RT stores small R too
    return {"name": point.name, "description": evaluated.policy.description, "available": point.available,
            "n": len(tally.scored), "missing_samples": tally.missing_samples,
            "missing_outputs": dict(sorted(tally.missing.items())), "mean_score": point.mean_score,
            "score_interval": list(mean_interval([s.score for s in tally.scored])) if tally.scored else None,
            "metric": evaluated.metric, "metric_value": evaluated.metric_value, "output_tokens": tally.output_tokens,
            "mean_output_tokens": point.mean_output_tokens, "prompt_tokens": tally.prompt_tokens,
            "small_calls": tally.calls["small"], "large_calls": tally.calls["large"], "seconds": point.seconds,
            "routes": dict(sorted(tally.routes.items())),
            "commands": [command(group, kind) for kind in sorted(missing - covered, key=kind_order)],
            "pgr": found.pgr.get(point.name), "pareto": point.name in found.names}


def command(group: Group, kind: str) -> str:
    """The `mai run` that stores `kind` for every sample of the group's split."""
    config = stored_config(group.runs[0])
    parts = ["mai", "run", "--benchmark", group.benchmark]
    data = {"data": config.get("data"), "split": config.get("split"), "subset": config.get("subset"),
            "revision": config.get("revision")}
    for option, value in data.items():
        if value:
            parts += [f"--{option}", str(value)]
    limits = [stored_config(r).get("limit") for r in group.runs]
    if limits and all(limits):
        parts += ["--limit", str(max(int(x) for x in limits if x))]
    parts += ["--small-model", str(config["small_model"]), "--large-model", str(config["large_model"])]
    for role in ROLES:
        if config_revision(config, role) != "main":
            parts += [f"--{role}-revision", config_revision(config, role)]
    if group.dtype != "float32":
        parts += ["--dtype", group.dtype]
    for budget_kind, tokens in sorted(config.get("max_new_tokens", {}).items()):
        if DEFAULT_MAX_NEW_TOKENS.get(budget_kind) != tokens:
            parts += ["--max-new-tokens", f"{budget_kind}={tokens}"]
    return shlex.join(parts + OUTPUT_KINDS[kind].run_flags())


def render_text(lab: LabRecord) -> str:
    """A lab as the table `mai policies` prints."""
    seconds = lab["cost_axis"] == "seconds"
    lines = [f"{lab['group']} ({lab['group_hashes'] or lab['dataset_fingerprint'][:12]}), {lab['small_model']} + "
             f"{lab['large_model']}: {lab['samples']} samples, {len(lab['runs'])} runs, scorer profile "
             f"{lab['scorer_profile']}"
             + (f", latency profiles {lab['latency_profiles']}" if seconds else ", no latency profiles (tokens only)"),
             "", (f"{'policy':22s} {'score %':>8s} {'95 % interval':>14s} {'n':>5s} {'PGR':>6s} {'tokens/sample':>13s} "
                 f"{'small':>6s} {'large':>6s} {'est. s':>9s}  pareto  routes")]
    for p in lab["policies"]:
        if not p["n"]:
            continue
        pgr = f"{p['pgr']:6.2f}" if p["pgr"] is not None else "     -"
        est = f"{p['seconds']:9.2f}" if p["seconds"] is not None else "        -"
        routes = " ".join(f"{k}={v}" for k, v in p["routes"].items())
        score, tokens = 100 * (p["mean_score"] or 0.0), p["mean_output_tokens"] or 0.0  # set: it answered every sample
        low, high = p["score_interval"] or [float("nan")] * 2
        interval = f"[{fixed(100 * low, 1)}, {fixed(100 * high, 1)}]"
        name = p["name"] + ("" if p["available"] else " (part)")  # on the samples where its inputs exist: its n
        lines.append(f"{name:22s} {score:8.1f} {interval:>14s} {p['n']:5d} {pgr} {tokens:13.1f} "
                     f"{p['small_calls']:6d} {p['large_calls']:6d} {est}  {'*' if p['pareto'] else ' ':6s}  {routes}")
    summary = lab["summary"]
    if summary["apgr"] is not None:
        lines += ["", (f"APGR-style area ({summary['weak']} -> {summary['strong']}): all policies "
                      f"{fixed(summary['apgr'], 3)}, single-output baselines {num(summary['apgr_baselines'], 3)}; "
                      f"oracle PGR {num(summary['oracle_pgr'])}; budget from {summary['budget'][0]} to "
                      f"{summary['budget'][1]}")]
    elif summary["budget_range"] is None:
        lines += ["", (f"no APGR-style area: its budget runs from {summary['budget'][0]} to "
                       f"{summary['budget'][1]}, and the lab needs both")]
    missing = [p for p in lab["policies"] if not p["available"]]
    for p in missing:
        lines.append(f"not stored for {p['missing_samples']} samples: {p['name']} (needs "
                     f"{', '.join(p['missing_outputs'])}); run: " + " ; ".join(p["commands"]))
    return "\n".join(lines)
