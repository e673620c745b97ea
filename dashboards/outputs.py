"""The kinds of stored output the dashboards combine and name ("small S", "small R+S2", "RT"), derived from the
stage table of `mai.cascade`: a stage's `label` names its output, its `upstream` stage gives the output its
prompt consumes, and the run settings whose stage list holds it give the `mai run` that stores it for every sample.
A new stage or label is written there, once; the policy lab and the report follow.

Only outputs that are one thing whatever run stored them are kinds here: a sparse run's RT reads a token selection
(a layer and a delta), so its outputs are that run's own and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from mai import cascade
from mai.dashboards.views import FULL_RT
from mai.storage.rows import RunRow
from mai.types import PromptKind, Role, RunMode, StageSpec

ROLES: tuple[Role, ...] = ("small", "large")
SINGLE_PROMPTS: tuple[PromptKind, ...] = ("S", "E", "R")  # the prompts a single-model baseline may answer


@dataclass(frozen=True)
class OutputKind:
    """One kind of output, and the run that stores it for every sample of a split."""

    stage: StageSpec
    consumes: str | None            # the label of the output its prompt holds (small R for RT and for small R+S2)
    mode: RunMode                   # the run that stores it for every sample: its mode ...
    single_prompt: PromptKind | None = None  # ... and, for a single-model run, its prompt and S2
    s2: bool = False

    @property
    def label(self) -> str:
        return self.stage.label

    @property
    def role(self) -> Role:
        return self.stage.role

    @property
    def roles(self) -> tuple[Role, ...]:
        """The models the run storing it uses."""
        return (self.role,) if self.mode == "single" else ROLES

    @property
    def baseline_name(self) -> str:
        """The output as a baseline of its own: its label, or what the run computing it is called (Full RT)."""
        return FULL_RT if self.mode == "full_rt" else self.label

    @property
    def answer(self) -> str:
        """What the label says beyond the model: 'R+S2' for 'small R+S2'."""
        return self.label.removeprefix(f"{self.role} ")

    def run_flags(self) -> list[str]:
        """The `mai run` flags of the run that stores it for every sample."""
        if self.mode != "single":
            return ["--mode", self.mode]
        return ["--mode", "single", "--single-model", self.role, "--single-prompt", str(self.single_prompt),
                *(["--s2"] if self.s2 else [])]

    def stored_by(self, run: RunRow) -> bool:
        """Whether `run` has this kind's settings (the models aside): it then stores it for each of its samples."""
        if self.mode == "single":
            return (run["mode"] == "single" and run["single_model"] == self.role
                    and run["single_prompt"] == self.single_prompt and run["s2"] == self.s2)
        return run["mode"] == self.mode and run["transfer"] == "full" and run["s2"] == self.s2


def _kinds() -> dict[str, OutputKind]:
    """Every kind by label, in the lab's order: small before large, S before E before R, plain before +S2 (the
    single-model baselines), then what only a pair computes (RT)."""
    kinds: dict[str, OutputKind] = {}

    def add(stages: list[StageSpec], mode: RunMode, prompt: PromptKind | None = None, s2: bool = False) -> None:
        labels = {stage.name: stage.label for stage in stages}
        for stage in stages:
            consumes = labels[stage.upstream] if stage.upstream else None
            # the first run listed that stores a label is the one that computes it alone (large S: a single run)
            kinds.setdefault(stage.label, OutputKind(stage, consumes, mode, prompt, s2 and stage.upstream is not None))

    for role in ROLES:
        for prompt in SINGLE_PROMPTS:
            for s2 in (False, True):
                add(cascade.stages_for("single", s2, role, prompt), "single", prompt, s2)
    add(cascade.stages_for("full_rt", False), "full_rt")
    for s2 in (False, True):
        add(cascade.stages_for("cascade", s2), "cascade", s2=s2)
    return kinds


OUTPUT_KINDS = _kinds()


def run_stages(run: RunRow) -> list[StageSpec]:
    """The stages a stored run has (the stage table's, from the run's settings)."""
    return cascade.stages_for(run["mode"], run["s2"], run["single_model"] or "large", run["single_prompt"] or "S",
                              run["transfer"])


def stored_kinds(run: RunRow) -> dict[str, str]:
    """Stage of a run -> the kind of output it holds, for the stages whose outputs are kinds."""
    return {stage.name: stage.label for stage in run_stages(run) if stage.label in OUTPUT_KINDS}


def kind_order(label: str) -> int:
    return list(OUTPUT_KINDS).index(label)
