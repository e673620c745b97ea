"""The routing-policy lab: what other routing policies would have given, from stored outputs, with no model.

For a benchmark split and a model pair ("a group": same data, models, revisions, dtype and token budgets), every
stored per-sample output of the group's runs is collected once: small S, large S, small R, small R+S2, large R,
RT (the large model reading the small model's full reasoning), E where stored. Each output is scored under one
scorer profile and priced (output tokens, calls of each model, and, with a latency profile per model, the
equation-27 seconds of `mai.latency`). Policies then combine them per sample:

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
q(small S)), and the area under the best PGR reachable within a budget, the budget normalised from the cheapest
to the dearest policy (a step function over the Pareto frontier: no mixing of policies is assumed).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mai.dashboards.views import USED_GENERATIONS, Row, default_profile, fetch, run_label, session
from mai.storage.paths import Home

from mai import cascade
from mai.config import DEFAULT_MAX_NEW_TOKENS
from mai.errors import ConfigError
from mai.evals.base import Benchmark, ScoredSample
from mai.evals.registry import get_benchmark
from mai.latency import Call, LatencyProfile, call_seconds
from mai.types import Role, Sample, StageAnswer, StageName

BUDGET_KINDS = ("S", "R", "S2", "RT")
# an output that needs another stored first (its prompt holds that output)
UPSTREAM = {"small R+S2": "small R", "large R+S2": "large R", "small E+S2": "small E", "large E+S2": "large E",
            "RT": "small R"}
# the `mai run` flags that compute an output for every sample of the split
RUN_FLAGS = {"RT": ["--mode", "full_rt"]}
WEAK, STRONG = "small S", "large S"


@dataclass(frozen=True)
class Output:
    kind: str            # "small S", "RT", ...
    role: Role
    gen_id: str
    text: str
    answer: str | None   # parsed with the benchmark's default profile: what routing compares
    score: float         # under the lab's scorer profile
    prompt_tokens: int
    output_tokens: int
    seconds: float | None  # equation 27 under the role's latency profile


@dataclass
class Tally:
    scored: list[ScoredSample] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    calls: dict[str, int] = field(default_factory=lambda: {"small": 0, "large": 0})
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
Policy = Callable[[Sample, dict[str, Output], Benchmark], "Decision | list[str]"]


def chain(outputs: dict[str, Output], kind: str) -> tuple[list[Output], list[str]]:
    """The output and everything upstream of it, and the kinds of those that are not stored."""
    kinds = [kind] + ([UPSTREAM[kind]] if kind in UPSTREAM else [])
    return [outputs[k] for k in kinds if k in outputs], [k for k in kinds if k not in outputs]


def alone(kind: str) -> Policy:
    def decide(sample: Sample, outputs: dict[str, Output], benchmark: Benchmark) -> Decision | list[str]:
        used, missing = chain(outputs, kind)
        return missing or (used[0], used, None)
    return decide


def mv1_then(fallback: str) -> Policy:
    def decide(sample: Sample, outputs: dict[str, Output], benchmark: Benchmark) -> Decision | list[str]:
        missing = [k for k in ("large S", "small S") if k not in outputs]
        if missing:
            return missing
        large, small = outputs["large S"], outputs["small S"]
        if benchmark.agree(large.answer, small.answer, sample):
            return large, [large, small], "MV1"
        used, missing = chain(outputs, fallback)
        return missing or (used[0], [large, small, *used], "fallback")
    return decide


def full_cascade(s2: bool) -> Policy:
    """`mai.cascade.route` over the stored outputs; the outputs a route used follow from its label."""
    stage_kinds: dict[StageName, str] = {"s_large": "large S", "s_small": "small S", "r_small": "small R",
                                         "rt_large": "RT", **({"s2_small": "small R+S2"} if s2 else {})}

    def decide(sample: Sample, outputs: dict[str, Output], benchmark: Benchmark) -> Decision | list[str]:
        # a stage key with no entry for the sample reads as "not answered", as in a run
        answers: dict[StageName, dict[str, StageAnswer]] = {
            stage: ({sample.sample_id: StageAnswer(outputs[kind].gen_id, outputs[kind].text, outputs[kind].answer)}
                    if kind in outputs else {}) for stage, kind in stage_kinds.items()}
        decision = cascade.route(sample, "cascade", answers, benchmark)
        kinds = ["large S", "small S"]
        if decision.route != "MV1":
            kinds += ["small R"] + (["small R+S2"] if s2 else [])
        if decision.route == "RT":
            kinds.append("RT")
        missing = [k for k in kinds if k not in outputs]
        if missing:
            return missing
        final = outputs["RT"] if decision.route == "RT" else outputs["large S"]
        return final, [outputs[k] for k in kinds], decision.route
    return decide


def oracle(cost: Callable[[Sequence[Output]], float]) -> Policy:
    """Per sample: the best score any stored output reaches, at the lowest cost of an output reaching it."""
    def decide(sample: Sample, outputs: dict[str, Output], benchmark: Benchmark) -> Decision | list[str]:
        chains = [used for used, missing in (chain(outputs, kind) for kind in sorted(outputs)) if not missing]
        if not chains:
            return ["any output"]
        best = min(chains, key=lambda c: (-c[0].score, cost(c), sum(o.role == "large" for o in c), c[0].kind))
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
# --- reading a group's outputs from the views ------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    benchmark: str
    dataset_fingerprint: str
    small_model: str
    large_model: str
    small_revision: str
    large_revision: str
    dtype: str
    budgets: tuple[tuple[str, int], ...]
    runs: tuple[Row, ...] = ()


def _config(run: Row) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(run["config_json"])
    return config


def _budgets(config: dict[str, Any], kinds: Sequence[str] = BUDGET_KINDS) -> tuple[tuple[str, int], ...]:
    tokens = {**DEFAULT_MAX_NEW_TOKENS, **config.get("max_new_tokens", {})}
    return tuple((kind, int(tokens[kind])) for kind in kinds)


def find_groups(home: Home, benchmark: str | None = None, small_model: str | None = None,
                large_model: str | None = None, dataset: str | None = None) -> list[Group]:
    """Groups of runs whose outputs can be combined: one per (data, pair, revisions, dtype, token budgets) of a
    cascade or Full RT run, joined by the single-model runs of either model with the same settings."""
    runs = fetch(home, "SELECT * FROM runs ORDER BY started_at, run_id")
    keys: dict[Group, list[Row]] = {}
    for run in runs:
        config = _config(run)
        if run["mode"] == "single" or (benchmark and run["benchmark"] != benchmark):
            continue
        key = Group(run["benchmark"], run["dataset_fingerprint"], run["small_model"], run["large_model"],
                    config["small_revision"], config["large_revision"], config["dtype"], _budgets(config))
        if (small_model and key.small_model != small_model) or (large_model and key.large_model != large_model) \
                or (dataset and not key.dataset_fingerprint.startswith(dataset)):
            continue
        keys.setdefault(key, [])
    for run in runs:
        for key, members in keys.items():
            if _joins(key, run):
                members.append(run)
    return [Group(**{**key.__dict__, "runs": tuple(members)}) for key, members in keys.items()]


def _joins(key: Group, run: Row) -> bool:
    config = _config(run)
    if run["benchmark"] != key.benchmark or run["dataset_fingerprint"] != key.dataset_fingerprint \
            or config["dtype"] != key.dtype:
        return False
    budgets = dict(key.budgets)
    if run["mode"] != "single":
        return (run["small_model"], run["large_model"], config["small_revision"], config["large_revision"],
                _budgets(config)) == (key.small_model, key.large_model, key.small_revision, key.large_revision,
                                      key.budgets)
    role = run["single_model"]
    model, revision = ((key.small_model, key.small_revision) if role == "small" else
                       (key.large_model, key.large_revision))
    kinds = [k for k in (run["single_prompt"], *(["S2"] if run["s2"] else [])) if k in budgets]
    return (run[f"{role}_model"], config[f"{role}_revision"]) == (model, revision) and \
        all(budgets[k] == v for k, v in _budgets(config, kinds))


def _output_kinds(run: Row) -> dict[str, str]:
    """Stage of a run -> the kind of output it holds, as the lab names them."""
    if run["mode"] == "single":
        kind = f"{run['single_model']} {run['single_prompt']}"
        return {"single": kind, "single_s2": f"{kind}+S2"}
    kinds = {"r_small": "small R"}
    if run["transfer"] == "full":  # a sparse run's RT reads a selection: another output
        kinds["rt_large"] = "RT"
    if run["mode"] == "cascade":
        kinds.update(s_large="large S", s_small="small S", s2_small="small R+S2")
    return kinds


def _role(kind: str) -> Role:
    return "small" if kind.startswith("small") else "large"


USED = f"SELECT run_id, sample_id, stage, gen_id FROM ({USED_GENERATIONS}) WHERE list_contains(?, run_id)"
GENERATIONS = (f"SELECT gen_id, text, prompt_tokens, output_tokens FROM generations "
               f"WHERE gen_id IN (SELECT gen_id FROM ({USED}))")
SAMPLES = ("SELECT * FROM samples WHERE dataset_fingerprint = ? AND sample_id IN "
           "(SELECT sample_id FROM routes WHERE list_contains(?, run_id) AND error IS NULL)")
ERRORS = "SELECT count(DISTINCT sample_id) AS n FROM routes WHERE list_contains(?, run_id) AND error IS NOT NULL"
ESTIMATED = ("SELECT e.stage, e.profile_name, ru.single_model FROM estimates e JOIN runs ru USING (run_id) "
             "WHERE list_contains(?, e.run_id) AND e.stage <> 'total'")


def _samples(home: Home, group: Group, run_ids: list[str]) -> list[Sample]:
    from mai.storage.samples import sample_from_row

    rows = fetch(home, SAMPLES, [group.dataset_fingerprint, run_ids])
    return sorted((sample_from_row(row) for row in rows), key=lambda s: (len(s.sample_id), s.sample_id))


def _outputs(home: Home, group: Group, samples: Sequence[Sample], benchmark: Benchmark, profile: str,
             latency: dict[str, LatencyProfile]) -> tuple[dict[str, dict[str, Output]], int]:
    """sample -> kind -> output, and how many (sample, kind) had two different generations (the first run's
    is kept: a group's settings should make them equal)."""
    run_ids = [r["run_id"] for r in group.runs]
    kinds = {r["run_id"]: _output_kinds(r) for r in group.runs}
    generations = {g["gen_id"]: g for g in fetch(home, GENERATIONS, [run_ids])}
    by_id = {s.sample_id: s for s in samples}
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    outputs: dict[str, dict[str, Output]] = {}
    conflicts = 0
    for row in sorted(fetch(home, USED, [run_ids]), key=lambda r: order[r["run_id"]]):
        kind = kinds[row["run_id"]].get(str(row["stage"]).removeprefix("gen_"))
        sample = by_id.get(row["sample_id"])
        if kind is None or sample is None:
            continue
        held = outputs.setdefault(sample.sample_id, {})
        if kind in held:
            conflicts += held[kind].gen_id != row["gen_id"]
            continue
        held[kind] = _output(kind, generations[row["gen_id"]], sample, benchmark, profile, latency)
    return outputs, conflicts


def _output(kind: str, generation: Row, sample: Sample, benchmark: Benchmark, profile: str,
            latency: dict[str, LatencyProfile]) -> Output:
    text, role = generation["text"], _role(kind)
    prompt_tokens, output_tokens = int(generation["prompt_tokens"]), int(generation["output_tokens"])
    seconds = None
    if role in latency:
        ttft, decode = call_seconds(latency[role], Call(kind, latency[role].model, prompt_tokens, output_tokens))
        seconds = ttft + decode
    answer = benchmark.parse_answer(text, sample)  # routing parses with the default profile (None)
    parsed = answer if profile == benchmark.profiles[0] else benchmark.parse_answer(text, sample, profile)
    score = benchmark.score(parsed, sample, profile)
    return Output(kind, role, generation["gen_id"], text, answer, score, prompt_tokens, output_tokens, seconds)


def _latency(home: Home, group: Group, small_profile: str | None, large_profile: str | None
             ) -> tuple[dict[str, LatencyProfile], dict[str, list[str]]]:
    """The latency profile of each role: the ones given, else the one every stored estimate of the group's runs
    used for that role (none when they used several: the choices are returned)."""
    from mai.storage.latency import read_profile

    found: dict[str, set[str]] = {"small": set(), "large": set()}
    for row in fetch(home, ESTIMATED, [[r["run_id"] for r in group.runs]]):
        stage = row["stage"]
        role = row["single_model"] if stage.startswith("single") else ("large" if "large" in stage else "small")
        found[role].add(row["profile_name"])
    chosen = {"small": small_profile, "large": large_profile}
    for role, names in found.items():
        if not chosen[role] and len(names) == 1:
            chosen[role] = next(iter(names))
    if not (chosen["small"] and chosen["large"]):
        return {}, {role: sorted(names) for role, names in found.items()}
    return {role: read_profile(home, str(name)) for role, name in chosen.items()}, {}


# --- the lab ---------------------------------------------------------------------------------------------------


def policy_labs(home: Home, benchmark: str | None = None, small_model: str | None = None,
                large_model: str | None = None, dataset: str | None = None, profile: str | None = None,
                small_profile: str | None = None, large_profile: str | None = None) -> list[dict[str, Any]]:
    """One lab per group of stored runs that match (see `find_groups`)."""
    with session(home):
        groups = find_groups(home, benchmark, small_model, large_model, dataset)
        if not groups:
            raise ConfigError("no stored cascade or Full RT run matches: a policy lab needs a model pair's run "
                              f"(benchmark={benchmark}, small={small_model}, large={large_model}, dataset={dataset})")
        return [policy_lab(home, group, profile, small_profile, large_profile) for group in groups]


def policy_lab(home: Home, group: Group, profile: str | None = None, small_profile: str | None = None,
               large_profile: str | None = None) -> dict[str, Any]:
    benchmark = get_benchmark(group.benchmark)
    chosen = profile or default_profile(group.benchmark)
    if chosen not in benchmark.profiles:
        raise ConfigError(f"benchmark '{benchmark.name}' has no scorer profile '{chosen}': "
                          f"choose one of {list(benchmark.profiles)}")
    run_ids = [r["run_id"] for r in group.runs]
    latency, choices = _latency(home, group, small_profile, large_profile)
    samples = _samples(home, group, run_ids)
    outputs, conflicts = _outputs(home, group, samples, benchmark, chosen, latency)
    by_seconds = bool(latency)

    def cost(used: Sequence[Output]) -> float:
        return sum((o.seconds or 0.0) if by_seconds else o.output_tokens for o in used)

    kinds = sorted({kind for held in outputs.values() for kind in held}, key=_kind_order)
    named: list[tuple[str, str, Policy]] = [
        *((f"{kind} alone" if kind != "RT" else "Full RT", _describe(kind), alone(kind)) for kind in kinds),
        ("MV1 -> small R", "MV1; on disagreement the small model's reasoned answer (MV1 + MV2 without RT)",
         mv1_then("small R")),
        ("MV1 -> RT", "MV1; on disagreement reasoning transfer at once (no MV2)", mv1_then("RT")),
        ("cascade", "MV1 -> small R -> MV2 -> RT (the paper's MAI)", full_cascade(False)),
        ("cascade +S2", "MV1 -> small R + S2 -> MV2 -> RT", full_cascade(True)),
        ("oracle", "per sample the cheapest stored answer with the best score", oracle(cost)),
    ]
    policies = [_summary(name, description, evaluate(policy, samples, outputs, benchmark), len(samples),
                         benchmark, chosen, by_seconds) for name, description, policy in named]
    for entry in policies:
        missing = set(entry["missing_outputs"]) - {"any output"}
        covered = {UPSTREAM[kind] for kind in missing if kind in UPSTREAM}  # a run storing RT stores small R too
        entry["commands"] = [_command(group, kind) for kind in sorted(missing - covered, key=_kind_order)]
    cost_axis = "seconds" if by_seconds else "mean_output_tokens"
    return {"benchmark": group.benchmark, "dataset_fingerprint": group.dataset_fingerprint,
            "small_model": group.small_model, "large_model": group.large_model, "dtype": group.dtype,
            "budgets": dict(group.budgets), "scorer_profile": chosen,
            "runs": [{"run_id": r["run_id"], "label": run_label(r)} for r in group.runs],
            "samples": len(samples), "errors": int(fetch(home, ERRORS, [run_ids])[0]["n"]),
            "conflicting_outputs": conflicts,
            "latency_profiles": {role: p.name for role, p in latency.items()} or None,
            "latency_profile_choices": choices or None, "cost_axis": cost_axis,
            "policies": policies, "summary": frontier_summary(policies, cost_axis)}


def _kind_order(kind: str) -> tuple[int, int, str]:
    """small before large, S before E before R, plain before +S2; RT (Full RT) last."""
    if kind == "RT":
        return (2, 0, kind)
    prompt = kind.split(" ", 1)[1]
    return (int(_role(kind) == "large"), "SER".find(prompt[0]), prompt)


def _describe(kind: str) -> str:
    if kind == "RT":
        return "small R, then the large model reads it (RT) for every sample"
    return f"the {_role(kind)} model's {kind.split(' ', 1)[1]} answer for every sample"


def _summary(name: str, description: str, tally: Tally, n_samples: int, benchmark: Benchmark, profile: str,
             by_seconds: bool) -> dict[str, Any]:
    n = len(tally.scored)
    available = n == n_samples and n > 0
    metrics = benchmark.aggregate(tally.scored, profile) if n else []
    headline = sorted((m for m in metrics if m.subset == "overall" and m.name not in
                       ("unparsed_rate", "yes_ratio", "precision", "recall", "row_accuracy")),
                      key=lambda m: (m.name != "f1", m.name))
    return {"name": name, "description": description, "available": available, "n": n,
            "missing_samples": tally.missing_samples, "missing_outputs": dict(sorted(tally.missing.items())),
            "mean_score": sum(s.score for s in tally.scored) / n if n else None,
            "metric": headline[0].name if headline else None, "metric_value": headline[0].value if headline else None,
            "output_tokens": tally.output_tokens, "mean_output_tokens": tally.output_tokens / n if n else None,
            "prompt_tokens": tally.prompt_tokens, "small_calls": tally.calls["small"],
            "large_calls": tally.calls["large"], "seconds": tally.seconds if by_seconds else None,
            "routes": dict(sorted(tally.routes.items()))}


def _command(group: Group, kind: str) -> str:
    """The `mai run` that stores `kind` for every sample of the group's split."""
    config = _config(group.runs[0])
    parts = ["mai", "run", "--benchmark", group.benchmark]
    for option in ("data", "split", "subset", "revision"):
        if config.get(option):
            parts += [f"--{option}", str(config[option])]
    limits = [_config(r).get("limit") for r in group.runs]
    if limits and all(limits):
        parts += ["--limit", str(max(int(x) for x in limits if x))]
    parts += ["--small-model", str(config["small_model"]), "--large-model", str(config["large_model"])]
    for role in ("small", "large"):
        if config[f"{role}_revision"] != "main":
            parts += [f"--{role}-revision", config[f"{role}_revision"]]
    if group.dtype != "float32":
        parts += ["--dtype", group.dtype]
    for budget_kind, tokens in sorted(config.get("max_new_tokens", {}).items()):
        if DEFAULT_MAX_NEW_TOKENS.get(budget_kind) != tokens:
            parts += ["--max-new-tokens", f"{budget_kind}={tokens}"]
    if kind in RUN_FLAGS:
        return shlex.join(parts + RUN_FLAGS[kind])
    role, prompt = kind.split(" ", 1)
    flags = ["--mode", "single", "--single-model", role, "--single-prompt", prompt.removesuffix("+S2")]
    return shlex.join(parts + flags + (["--s2"] if prompt.endswith("+S2") else []))


def frontier_summary(policies: list[dict[str, Any]], cost_axis: str) -> dict[str, Any]:
    """The Pareto frontier (cheapest first) of the available policies, the oracle aside, and the APGR-style areas
    (module docstring): over every policy, and over the single-output baselines only."""
    usable = [p for p in policies if p["available"] and p["name"] != "oracle"]
    by_name = {p["name"]: p for p in usable}
    frontier: list[str] = []
    best = None
    for p in sorted(usable, key=lambda p: (p[cost_axis], -p["mean_score"], p["name"])):
        if best is None or p["mean_score"] > best:
            frontier.append(p["name"])
            best = p["mean_score"]
    weak, strong = by_name.get(f"{WEAK} alone"), by_name.get(f"{STRONG} alone")
    gap = (strong["mean_score"] - weak["mean_score"]) if weak and strong else 0.0
    for p in policies:
        p["pgr"] = (p["mean_score"] - weak["mean_score"]) / gap if gap and weak and p["mean_score"] is not None \
            else None
        p["pareto"] = p["name"] in frontier
    baselines = [p for p in usable if p["name"].endswith(" alone") or p["name"] == "Full RT"]
    oracle_entry = next((p for p in policies if p["name"] == "oracle" and p["available"]), None)
    return {"frontier": frontier, "weak": f"{WEAK} alone", "strong": f"{STRONG} alone",
            "apgr": _area(usable, cost_axis) if gap else None,
            "apgr_baselines": _area(baselines, cost_axis) if gap else None,
            "oracle_pgr": oracle_entry["pgr"] if oracle_entry else None}


def _area(policies: list[dict[str, Any]], cost_axis: str) -> float | None:
    """Area under the best PGR reachable at a normalised budget x in [0, 1] (a step function)."""
    if not policies:
        return None
    costs = [p[cost_axis] for p in policies]
    low, high = min(costs), max(costs)
    points = sorted(((p[cost_axis] - low) / (high - low) if high > low else 0.0, p["pgr"]) for p in policies)
    area, best = 0.0, None
    for (x, pgr), following in zip(points, [x for x, _ in points[1:]] + [1.0]):
        best = pgr if best is None else max(best, pgr)
        area += best * (following - x)
    return area


def render_text(lab: dict[str, Any]) -> str:
    """A lab as the table `mai policies` prints."""
    seconds = lab["cost_axis"] == "seconds"
    lines = [f"{lab['benchmark']} ({lab['dataset_fingerprint'][:12]}), {lab['small_model']} + {lab['large_model']}: "
             f"{lab['samples']} samples, {len(lab['runs'])} runs, scorer profile {lab['scorer_profile']}"
             + (f", latency profiles {lab['latency_profiles']}" if seconds else ", no latency profiles (tokens only)"),
             "", (f"{'policy':22s} {'score %':>8s} {'PGR':>6s} {'tokens/sample':>13s} {'small':>6s} {'large':>6s} "
                 f"{'est. s':>9s}  pareto  routes")]
    for p in lab["policies"]:
        if not p["available"]:
            continue
        pgr = f"{p['pgr']:6.2f}" if p["pgr"] is not None else "     -"
        est = f"{p['seconds']:9.2f}" if p["seconds"] is not None else "        -"
        routes = " ".join(f"{k}={v}" for k, v in p["routes"].items())
        lines.append(f"{p['name']:22s} {100 * p['mean_score']:8.1f} {pgr} {p['mean_output_tokens']:13.1f} "
                     f"{p['small_calls']:6d} {p['large_calls']:6d} {est}  {'*' if p['pareto'] else ' ':6s}  {routes}")
    summary = lab["summary"]
    if summary["apgr"] is not None:
        lines += ["", (f"APGR-style area ({summary['weak']} -> {summary['strong']}): all policies "
                      f"{summary['apgr']:.3f}, single-output baselines {summary['apgr_baselines']:.3f}; oracle PGR "
                      f"{summary['oracle_pgr']:.2f}")]
    missing = [p for p in lab["policies"] if not p["available"]]
    for p in missing:
        lines.append(f"not stored for {p['missing_samples']} samples: {p['name']} (needs "
                     f"{', '.join(p['missing_outputs'])}); run: " + " ; ".join(p["commands"]))
    return "\n".join(lines)
