"""The MAI routing policy (paper section 4, figure 2c) and its baselines, as pure functions.

cascade : MV1 (large S vs small S) -> small R (+ optional S2) -> MV2 (small answer vs large S) -> RT
single  : one model, one prompt kind (S, E or R), optionally followed by S2
full_rt : small R, then RT on the large model for every sample ("8B + 2B-R")

The flow asks `stages_for` which stages a run has, `samples_needing` which samples each stage must
answer (given the stored answers of earlier stages) and finally `route` for the decision per sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mai.errors import ConfigError
from mai.evals.base import Benchmark
from mai.types import (
    PromptKind,
    Role,
    Route,
    RouteDecision,
    RunMode,
    Sample,
    StageAnswer,
    StageName,
    StageSpec,
)

Answers = Mapping[StageName, Mapping[str, StageAnswer]]

# The stage table: every stage a run can have, defined once (flows run them, reports and the policy lab name
# their outputs by `label`).
S_LARGE = StageSpec("s_large", "large", "S", label="large S")
S_SMALL = StageSpec("s_small", "small", "S", label="small S")
R_SMALL = StageSpec("r_small", "small", "R", label="small R")
S2_SMALL = StageSpec("s2_small", "small", "S2", upstream="r_small", label="small R+S2")
RT_LARGE = StageSpec("rt_large", "large", "RT", upstream="r_small", label="RT")
# sparse RT: the large model's attention selects reasoning tokens (a step of its own), RT reads the selection
SELECT_RT = StageSpec("select_rt", "large", "RT", upstream="r_small", label="RT selection")
RT_LARGE_SPARSE = StageSpec("rt_large", "large", "RT", upstream="select_rt", label="sparse RT")


def stages_for(mode: RunMode, s2: bool, single_role: Role = "large", single_kind: PromptKind = "S",
               transfer: str = "full") -> list[StageSpec]:
    """The run's steps in order. With sparse transfer, token selection is one more step that feeds RT."""
    rt = [SELECT_RT, RT_LARGE_SPARSE] if transfer == "sparse" else [RT_LARGE]
    if mode == "cascade":
        return [S_LARGE, S_SMALL, R_SMALL, *([S2_SMALL] if s2 else []), *rt]
    if mode == "full_rt":
        if s2:
            raise ConfigError("S2 has no effect in full_rt mode (RT consumes the small model's reasoning): drop --s2")
        return [R_SMALL, *rt]
    if single_kind not in ("S", "E", "R"):
        raise ConfigError(f"a single-model baseline uses prompt S, E or R, not {single_kind}")
    return single_stages(single_role, single_kind, s2)


def single_stages(role: Role, kind: PromptKind, s2: bool) -> list[StageSpec]:
    """A single-model baseline: one model, one prompt kind ("large R"), optionally followed by S2 ("large R+S2")."""
    single = StageSpec("single", role, kind, label=f"{role} {kind}")
    return [single, *([StageSpec("single_s2", role, "S2", upstream="single", label=f"{role} {kind}+S2")] if s2 else [])]


def stage_groups(stages: Sequence[StageSpec]) -> list[list[StageSpec]]:
    """Stages that can run at the same time: the two MV1 calls; every other stage waits for the last."""
    mv1 = [s for s in stages if s.name in ("s_large", "s_small")]
    rest = [[s] for s in stages if s not in mv1]
    return ([mv1] if mv1 else []) + rest


def samples_needing(
    stage: StageSpec, mode: RunMode, samples: Sequence[Sample], answers: Answers, benchmark: Benchmark
) -> list[Sample]:
    """The samples this stage must answer; earlier stages' answers must already be in `answers`."""
    if mode != "cascade" or stage.name in ("s_large", "s_small"):
        return list(samples)
    unresolved = [s for s in samples if not _mv1_agrees(s, answers, benchmark)]
    if stage.name in ("r_small", "s2_small"):
        return unresolved
    return [s for s in unresolved if not _mv2_agrees(s, answers, benchmark)]


def _answer(answers: Answers, stage: StageName, sample_id: str) -> str | None:
    found = answers.get(stage, {}).get(sample_id)
    return found.answer if found else None


def _small_reasoned_answer(sample: Sample, answers: Answers) -> str | None:
    """With S2 the small model's stage-2 answer replaces the one parsed from its reasoning."""
    stage: StageName = "s2_small" if "s2_small" in answers else "r_small"
    return _answer(answers, stage, sample.sample_id)


def _mv1_agrees(sample: Sample, answers: Answers, benchmark: Benchmark) -> bool:
    large, small = _answer(answers, "s_large", sample.sample_id), _answer(answers, "s_small", sample.sample_id)
    return benchmark.agree(large, small, sample)


def _mv2_agrees(sample: Sample, answers: Answers, benchmark: Benchmark) -> bool:
    large = _answer(answers, "s_large", sample.sample_id)
    return benchmark.agree(_small_reasoned_answer(sample, answers), large, sample)


def route(sample: Sample, mode: RunMode, answers: Answers, benchmark: Benchmark) -> RouteDecision:
    """The final answer and the stage that decided it. On agreement the large model's short answer is
    returned (under a fuzzy agreement rule such as ANLS the two may differ in form)."""
    sid = sample.sample_id
    seen: dict[StageName, str | None] = {stage: _answer(answers, stage, sid) for stage in answers if sid in answers[stage]}
    gen_ids: dict[StageName, str] = {stage: answers[stage][sid].gen_id for stage in answers if sid in answers[stage]}

    def decided(label: Route, final: StageName) -> RouteDecision:
        return RouteDecision(sample_id=sid, route=label, final_answer=seen.get(final), final_gen_id=gen_ids.get(final),
                             answers=seen, gen_ids=gen_ids, agreement_rule=benchmark.agreement_rule)

    if mode == "single":
        return decided("SINGLE", "single_s2" if "single_s2" in answers else "single")
    if mode == "full_rt":
        return decided("RT", "rt_large")
    if _mv1_agrees(sample, answers, benchmark):
        return decided("MV1", "s_large")
    if _mv2_agrees(sample, answers, benchmark):
        return decided("MV2", "s_large")
    return decided("RT", "rt_large")
