"""What the routing-policy lab reads from the catalog views: groups of runs whose outputs can be combined (same
data, models, revisions, dtype and token budgets), and each group's stored outputs, per sample and kind, scored
under one scorer profile and priced (tokens, and equation-27 seconds under a latency profile per model)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from mai.config import DEFAULT_MAX_NEW_TOKENS
from mai.dashboards.groups import SampleSet, read_sample_sets
from mai.dashboards.outputs import OUTPUT_KINDS, run_stages, stored_kinds
from mai.dashboards.rows import CountRow, UsedRow
from mai.dashboards.views import USED_GENERATIONS, fetch, read_runs, role_model
from mai.evals.base import Benchmark
from mai.latency_estimate import Call, LatencyProfile, call_seconds
from mai.storage.paths import Home
from mai.storage.rows import RunRow, SampleRow
from mai.types import Role, Sample

BUDGET_KINDS = ("S", "R", "S2", "RT")


class StoredConfig(TypedDict):
    """The fields of a run's stored configuration (`runs.config_json`) the lab reads."""

    small_model: str
    large_model: str
    small_revision: str
    large_revision: str
    dtype: str
    max_new_tokens: dict[str, int]
    data: str | None
    split: str | None
    subset: str | None
    revision: str | None
    limit: int | None


class GenerationRow(TypedDict):
    gen_id: str
    text: str
    prompt_tokens: int
    output_tokens: int


class EstimatedRow(TypedDict):
    run_id: str
    stage: str
    profile_name: str


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
    runs: tuple[RunRow, ...] = ()
    # the comparison group (mai.dashboards.groups): every run of the lab answered exactly these samples
    sample_set: SampleSet | None = None

    def revision(self, role: Role) -> str:
        return self.small_revision if role == "small" else self.large_revision

    def model(self, role: Role) -> str:
        return self.small_model if role == "small" else self.large_model


@dataclass(frozen=True)
class Output:
    kind: str            # "small S", "RT", ... (mai.dashboards.outputs)
    role: Role
    gen_id: str
    text: str
    answer: str | None   # parsed with the benchmark's default profile: what routing compares
    score: float         # under the lab's scorer profile
    prompt_tokens: int
    output_tokens: int
    seconds: float | None  # equation 27 under the role's latency profile


SampleOutputs = Mapping[str, Output]  # kind -> the sample's stored output of that kind


def stored_config(run: RunRow) -> StoredConfig:
    config: StoredConfig = json.loads(run["config_json"])
    return config


def config_revision(config: StoredConfig, role: Role) -> str:
    return config["small_revision"] if role == "small" else config["large_revision"]


def budgets(config: StoredConfig, kinds: Sequence[str] = BUDGET_KINDS) -> tuple[tuple[str, int], ...]:
    tokens = {**DEFAULT_MAX_NEW_TOKENS, **config.get("max_new_tokens", {})}
    return tuple((kind, int(tokens[kind])) for kind in kinds)


def find_groups(home: Home, benchmark: str | None = None, small_model: str | None = None,
                large_model: str | None = None, dataset: str | None = None) -> list[Group]:
    """Groups of runs whose outputs can be combined: one per (data, pair, revisions, dtype, token budgets) of a
    cascade or Full RT run and its comparison group (the exact samples it answered, mai.dashboards.groups), joined
    by the single-model runs of either model with the same settings over the same samples: a policy never combines
    outputs of two sample sets, and its oracle chooses among outputs every sample has."""
    runs = read_runs(home)
    keys: dict[Group, list[RunRow]] = {}
    for run in runs:
        if run["mode"] == "single" or (benchmark and run["benchmark"] != benchmark):
            continue
        key = _group_of(run)
        if (small_model and key.small_model != small_model) or (large_model and key.large_model != large_model) \
                or (dataset and not key.dataset_fingerprint.startswith(dataset)):
            continue
        keys.setdefault(key, [])
    for run in runs:
        for key, members in keys.items():
            if _joins(key, run):
                members.append(run)
    sets = read_sample_sets(home, runs)
    found = []
    for key, members in keys.items():
        for sample_set in sorted({sets[r["run_id"]] for r in members if r["mode"] != "single" and r["run_id"] in sets}):
            mine = tuple(r for r in members if sets.get(r["run_id"]) == sample_set)
            found.append(dataclasses.replace(key, runs=mine, sample_set=sample_set))
    return found


def _group_of(pair_run: RunRow) -> Group:
    config = stored_config(pair_run)
    return Group(pair_run["benchmark"], pair_run["dataset_fingerprint"], str(pair_run["small_model"]),
                 str(pair_run["large_model"]), config["small_revision"], config["large_revision"], config["dtype"],
                 budgets(config))


def _joins(key: Group, run: RunRow) -> bool:
    config = stored_config(run)
    if run["benchmark"] != key.benchmark or run["dataset_fingerprint"] != key.dataset_fingerprint \
            or config["dtype"] != key.dtype:
        return False
    if run["mode"] != "single":
        return dataclasses.replace(_group_of(run), runs=()) == dataclasses.replace(key, runs=())
    role = run["single_model"] or "large"
    group_budgets = dict(key.budgets)
    kinds = [k for k in (run["single_prompt"], *(["S2"] if run["s2"] else [])) if k in group_budgets]
    return (role_model(run, role), config_revision(config, role)) == (key.model(role), key.revision(role)) and \
        all(group_budgets[k] == v for k, v in budgets(config, kinds))


USED = f"SELECT run_id, sample_id, stage, gen_id FROM ({USED_GENERATIONS}) WHERE list_contains(?, run_id)"
GENERATIONS = (f"SELECT gen_id, text, prompt_tokens, output_tokens FROM generations "
               f"WHERE gen_id IN (SELECT gen_id FROM ({USED}))")
SAMPLES = ("SELECT * FROM samples WHERE dataset_fingerprint = ? AND sample_id IN "
           "(SELECT sample_id FROM routes WHERE list_contains(?, run_id) AND error IS NULL)")
ERRORS = "SELECT count(DISTINCT sample_id) AS n FROM routes WHERE list_contains(?, run_id) AND error IS NOT NULL"
ESTIMATED = "SELECT run_id, stage, profile_name FROM estimates WHERE list_contains(?, run_id) AND stage <> 'total'"


def run_ids(group: Group) -> list[str]:
    return [r["run_id"] for r in group.runs]


def read_samples(home: Home, group: Group) -> list[Sample]:
    from mai.storage.samples import sample_from_row

    rows = fetch(home, SampleRow, SAMPLES, [group.dataset_fingerprint, run_ids(group)])
    return sorted((sample_from_row(dict(row)) for row in rows), key=lambda s: (len(s.sample_id), s.sample_id))


def count_errors(home: Home, group: Group) -> int:
    return int(fetch(home, CountRow, ERRORS, [run_ids(group)])[0]["n"])


@dataclass(frozen=True)
class Pricing:
    """How the lab scores and prices an output."""

    benchmark: Benchmark
    profile: str                        # the scorer profile
    latency: Mapping[Role, LatencyProfile]  # empty: priced in tokens only


def read_outputs(home: Home, group: Group, samples: Sequence[Sample], pricing: Pricing
                 ) -> tuple[dict[str, dict[str, Output]], int]:
    """sample -> kind -> output, and how many (sample, kind) had two different generations (the first run's
    is kept: a group's settings should make them equal)."""
    ids = run_ids(group)
    kinds = {r["run_id"]: stored_kinds(r) for r in group.runs}
    generations = {g["gen_id"]: g for g in fetch(home, GenerationRow, GENERATIONS, [ids])}
    by_id = {s.sample_id: s for s in samples}
    order = {run_id: i for i, run_id in enumerate(ids)}
    outputs: dict[str, dict[str, Output]] = {}
    conflicts, lost = 0, set[str]()
    for row in sorted(fetch(home, UsedRow, USED, [ids]), key=lambda r: order[r["run_id"]]):
        kind = kinds[row["run_id"]].get(row["stage"].removeprefix("gen_"))
        sample = by_id.get(row["sample_id"])
        if kind is None or sample is None:
            continue
        held = outputs.setdefault(sample.sample_id, {})
        if kind in held:
            conflicts += held[kind].gen_id != row["gen_id"]
        elif row["gen_id"] not in generations:  # lost with a damaged file (storage/damage.py): not in the lab
            lost.add(sample.sample_id)
        else:
            held[kind] = _output(kind, generations[row["gen_id"]], sample, pricing)
    return {sid: held for sid, held in outputs.items() if sid not in lost}, conflicts


def _output(kind: str, generation: GenerationRow, sample: Sample, pricing: Pricing) -> Output:
    text, role = generation["text"], OUTPUT_KINDS[kind].role
    prompt_tokens, output_tokens = int(generation["prompt_tokens"]), int(generation["output_tokens"])
    seconds = None
    if role in pricing.latency:
        profile = pricing.latency[role]
        ttft, decode = call_seconds(profile, Call(kind, profile.model, prompt_tokens, output_tokens))
        seconds = ttft + decode
    benchmark = pricing.benchmark
    answer = benchmark.parse_answer(text, sample)  # routing parses with the default profile (None)
    parsed = answer if pricing.profile == benchmark.profiles[0] else benchmark.parse_answer(text, sample,
                                                                                               pricing.profile)
    score = benchmark.score(parsed, sample, pricing.profile)
    return Output(kind, role, generation["gen_id"], text, answer, score, prompt_tokens, output_tokens, seconds)


@dataclass(frozen=True)
class LatencyChoice:
    """The latency profile of each role (empty when a role has none or several), and the names stored per role."""

    profiles: dict[Role, LatencyProfile]
    choices: dict[Role, list[str]]


def read_latency(home: Home, group: Group, small_profile: str | None, large_profile: str | None) -> LatencyChoice:
    """The latency profile of each role: the ones given, else the one every stored estimate of the group's runs
    used for that role (none when they used several: the choices are returned)."""
    from mai.storage.latency import read_profile

    roles: dict[str, dict[str, Role]] = {r["run_id"]: {stage.name: stage.role for stage in run_stages(r)}
                                         for r in group.runs}
    found: dict[Role, set[str]] = {"small": set(), "large": set()}
    for row in fetch(home, EstimatedRow, ESTIMATED, [run_ids(group)]):
        role = roles[row["run_id"]].get(row["stage"])
        if role is not None:
            found[role].add(row["profile_name"])
    chosen: dict[Role, str | None] = {"small": small_profile, "large": large_profile}
    for role, names in found.items():
        if not chosen[role] and len(names) == 1:
            chosen[role] = next(iter(names))
    small, large = chosen["small"], chosen["large"]
    if not (small and large):
        return LatencyChoice({}, {role: sorted(names) for role, names in found.items()})
    return LatencyChoice({"small": read_profile(home, small), "large": read_profile(home, large)}, {})
