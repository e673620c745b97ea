"""Routing policy over scripted answers (pure logic: a fake answer table stands in for the models)."""

from __future__ import annotations

from mai import cascade
from mai.evals.demo import DemoBenchmark
from mai.types import Sample, StageAnswer, StageName

BENCH = DemoBenchmark()


def sample(sid: str) -> Sample:
    return Sample(sample_id=sid, benchmark="demo", question="Is it red?", options=(), answer="yes", image_paths=(),
                  image_sha256=(), category="presence", content_hash=sid, answer_style="phrase")


def answers(table: dict[StageName, dict[str, str | None]]) -> dict[StageName, dict[str, StageAnswer]]:
    return {stage: {sid: StageAnswer(f"{stage}-{sid}", f"[[{a}]]", a) for sid, a in by_sample.items()}
            for stage, by_sample in table.items()}


SAMPLES = [sample("agree"), sample("mv2"), sample("rt"), sample("unparsed")]
MV1 = {"s_large": {"agree": "yes", "mv2": "yes", "rt": "no", "unparsed": None},
       "s_small": {"agree": "yes", "mv2": "no", "rt": "yes", "unparsed": None}}


def test_stage_plans() -> None:
    assert [s.name for s in cascade.stages_for("cascade", s2=False)] == ["s_large", "s_small", "r_small", "rt_large"]
    assert [s.name for s in cascade.stages_for("cascade", s2=True)][3] == "s2_small"
    assert [s.name for s in cascade.stages_for("full_rt", s2=False)] == ["r_small", "rt_large"]
    single = cascade.stages_for("single", s2=True, single_role="small", single_kind="R")
    assert [(s.name, s.role, s.prompt_kind, s.upstream) for s in single] == [
        ("single", "small", "R", None), ("single_s2", "small", "S2", "single")]
    groups = cascade.stage_groups(cascade.stages_for("cascade", s2=True))
    assert [[s.name for s in g] for g in groups] == [["s_large", "s_small"], ["r_small"], ["s2_small"], ["rt_large"]]


def test_mv1_then_mv2_then_rt() -> None:
    stages = {s.name: s for s in cascade.stages_for("cascade", s2=False)}
    table = answers({**MV1, "r_small": {"mv2": "yes", "rt": "yes", "unparsed": "no"}})
    reasoning = cascade.samples_needing(stages["r_small"], "cascade", SAMPLES, table, BENCH)
    assert [s.sample_id for s in reasoning] == ["mv2", "rt", "unparsed"]  # None never agrees, even with None
    transfer = cascade.samples_needing(stages["rt_large"], "cascade", SAMPLES, table, BENCH)
    assert [s.sample_id for s in transfer] == ["rt", "unparsed"]
    table = answers({**MV1, "r_small": {"mv2": "yes", "rt": "yes", "unparsed": "no"},
                     "rt_large": {"rt": "no", "unparsed": "yes"}})
    decided = {s.sample_id: cascade.route(s, "cascade", table, BENCH) for s in SAMPLES}
    assert {k: d.route for k, d in decided.items()} == {"agree": "MV1", "mv2": "MV2", "rt": "RT", "unparsed": "RT"}
    assert decided["mv2"].final_answer == "yes" and decided["mv2"].final_gen_id == "s_large-mv2"
    assert decided["rt"].final_answer == "no" and decided["rt"].final_gen_id == "rt_large-rt"
    assert decided["rt"].answers["r_small"] == "yes" and decided["agree"].gen_ids == {
        "s_large": "s_large-agree", "s_small": "s_small-agree"}


def test_s2_answer_replaces_the_one_parsed_from_reasoning() -> None:
    stages = {s.name: s for s in cascade.stages_for("cascade", s2=True)}
    table = answers({**MV1, "r_small": {"mv2": None, "rt": "no", "unparsed": None},
                     "s2_small": {"mv2": "yes", "rt": "yes", "unparsed": None}})
    transfer = cascade.samples_needing(stages["rt_large"], "cascade", SAMPLES, table, BENCH)
    assert [s.sample_id for s in transfer] == ["rt", "unparsed"]


def test_baselines_route_every_sample_the_same_way() -> None:
    table = answers({"single": {s.sample_id: "yes" for s in SAMPLES}, "single_s2": {"agree": "no"}})
    assert cascade.route(SAMPLES[0], "single", table, BENCH).final_answer == "no"
    full = answers({"r_small": {"rt": "x"}, "rt_large": {"rt": "yes"}})
    decision = cascade.route(SAMPLES[2], "full_rt", full, BENCH)
    assert (decision.route, decision.final_answer) == ("RT", "yes")
