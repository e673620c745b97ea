"""Comparison groups: which runs a report may set side by side, and the cells that say how sure a number is.

A group is a benchmark and a sample set: the same data (the dataset fingerprint) and the same samples (the sorted
sample ids every route row of the run names, so a 24-sample run and a 160-sample run of the same data are two
groups). A table of the report is built per group and a cell never reads a run of another group: where the run
a cell wants is stored only over other samples, the cell is missing and says which run exists and over how many.
Within a group, rows are models or model pairs, as the paper's tables have them.

Cells: a score with its 95 % interval and n ("83.1 [76.5, 88.9] n=160"), and, where the paper compares two
settings (MAI against a baseline, Full RT against large S), the paired difference on the same samples with the
two-sided exact test `mai compare` computes (`mai.paired.compare_pairs`: McNemar's for 0/1 scores, the sign test
for graded ones)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from mai.dashboards.charts import DASH, Cell, Section, Table
from mai.dashboards.paper_internvl import PaperTable, paper_uses_s2, paper_value
from mai.dashboards.rounding import fixed
from mai.dashboards.views import fetch, run_models
from mai.paired import compare_pairs, mean_interval
from mai.provenance import UNKNOWN
from mai.storage.paths import Home
from mai.storage.rows import RunRow

# per run: its samples, named by the sorted sample ids (a run's route rows: one per sample, errors included)
SAMPLE_IDS = """
    SELECT run_id, md5(string_agg(sample_id, ',' ORDER BY sample_id)) AS sample_ids, count(*) AS n
    FROM routes GROUP BY run_id
"""
INTERNVL = "internvl"


class SampleIdsRow(TypedDict):
    run_id: str
    sample_ids: str
    n: int


@dataclass(frozen=True, order=True)
class SampleSet:
    """A benchmark split, its data and the exact samples a run answered: the key of a comparison group. The split
    is the run's own (its stored configuration), not read from the data fingerprint."""

    benchmark: str
    dataset_fingerprint: str
    n: int
    sample_ids: str  # md5 of the run's sorted sample ids
    split: str = ""
    chosen: str = field(default="", compare=False)  # how the samples were chosen, in words: "first 24 rows"

    @property
    def key(self) -> str:
        """A short id for anchors and test hooks: 'shapes-1a2b3c4d-5e6f7a8b' (with the split where it is not the
        benchmark's default: 'shapes-train-...')."""
        split = f"{self.split}-" if self.split and self.split != default_split(self.benchmark) else ""
        return f"{self.benchmark}-{split}{self.dataset_fingerprint.split(':')[-1][:8]}-{self.sample_ids[:8]}"

    @property
    def label(self) -> str:
        """In words, as a paper names its data: 'shapes test, 24 samples (first 24 rows)'."""
        return f"{self.benchmark} {self.split or 'default split'}, {self.n} samples" + (
            f" ({self.chosen})" if self.chosen else "")

    @property
    def hashes(self) -> str:
        """The exact set, for a tooltip: the data fingerprint and the md5 of the sorted sample ids."""
        return f"data {self.dataset_fingerprint}, sample ids md5 {self.sample_ids}"


def default_split(benchmark: str) -> str:
    """The split a run of `benchmark` reads without --split ('' for a benchmark this process does not know)."""
    from mai.evals.registry import BENCHMARKS

    entry = BENCHMARKS.get(benchmark)
    return entry.split if entry is not None else ""


def run_split(run: RunRow) -> str:
    """The split the run read: its configuration's, else its benchmark spec's, else the benchmark's default."""
    config = json.loads(run["config_json"] or "{}")
    spec = config.get("benchmark_spec") or {}
    return str(config.get("split") or spec.get("split") or default_split(run["benchmark"]))


def run_chosen(run: RunRow) -> str:
    """How the run chose its samples, in words: 'first 24 rows', or '' for every row."""
    limit = json.loads(run["config_json"] or "{}").get("limit")
    return f"first {limit} rows" if limit else "every row"


def group_caption(group: SampleSet, runs: Iterable[RunRow]) -> str:
    """A comparison group's caption in words: 'shapes test, 24 samples (first 24 rows); mai-tiny-small +
    mai-tiny-large; runs named demo, sweep' (the model pairs, else the models, of `runs`, and the names given with
    --name). The hashes that pin the exact set are the caption's tooltip (`SampleSet.hashes`)."""
    runs = list(runs)
    pairs = sorted({run_models(r) for r in runs if r["mode"] != "single"})
    models = pairs or sorted({run_models(r) for r in runs})
    names = sorted({name for r in runs if (name := given_name(r))})
    return "; ".join([group.label, *([" and ".join(models)] if models else []),
                      *([f"runs named {', '.join(names)}"] if names else [])])


def given_name(run: RunRow) -> str:
    """The name given with --name ('' when the run is named by its id, as runs are without one)."""
    name = run["run_name"] or ""
    return "" if name == run["run_id"] else name


def read_sample_sets(home: Home, runs: Iterable[RunRow]) -> dict[str, SampleSet]:
    """Each run's sample set (runs without route rows have none)."""
    by_run = {r["run_id"]: r for r in runs}
    return {row["run_id"]: SampleSet(run["benchmark"], run["dataset_fingerprint"], int(row["n"]), row["sample_ids"],
                                     run_split(run), run_chosen(run))
            for row in fetch(home, SampleIdsRow, SAMPLE_IDS) if (run := by_run.get(row["run_id"])) is not None}


def group_runs(runs: Iterable[RunRow], sample_sets: dict[str, SampleSet]) -> dict[SampleSet, list[RunRow]]:
    """The runs per sample set, groups in a fixed order (benchmark, data, size), runs oldest first."""
    groups: dict[SampleSet, list[RunRow]] = defaultdict(list)
    for run in runs:
        if run["run_id"] in sample_sets:
            groups[sample_sets[run["run_id"]]].append(run)
    return dict(sorted(groups.items()))


# recorded families that name no family: the config could not be read, or it names an architecture no backend
# family claims (a non-HF 'internvl_chat' checkpoint runs as mai.backends.untested_family's 'untested'); such a
# model goes by its name
UNNAMED_FAMILIES = (UNKNOWN, "untested")


def model_families(runs: Iterable[RunRow]) -> dict[str, str]:
    """Model name -> family, as each run recorded it at run time (`provenance_json`, mai.provenance). A model
    only runs stored before that know, or whose family they could not name, is named by its name: 'internvl'
    when the name says so."""
    families: dict[str, str] = {}
    for run in runs:
        recorded = json.loads(run["provenance_json"] or "{}").get("models") or {}
        for model in recorded.values():
            if model.get("family") and model["family"] not in UNNAMED_FAMILIES:
                families[str(model["name"])] = str(model["family"])
    return families


def family(families: dict[str, str], model: str | None) -> str | None:
    if model is None:
        return None
    return families.get(model) or (INTERNVL if INTERNVL in model.lower().replace("_", "") else None)


# --- cells -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """A run's headline value and its per-sample scores (the benchmark's default scorer profile)."""

    run_id: str
    metric: str
    value: float
    scores: dict[str, float]


def score_cell(scored: Scored) -> str:
    """'83.1 [76.5, 88.9] n=160': the headline (%) with a 95 % interval of the mean per-sample score, where the
    headline is that mean (accuracy and its kin); a headline that is no mean over samples (F1) gets n only."""
    n = len(scored.scores)
    if not n:
        return f"{fixed(100 * scored.value, 1)} n=0"
    mean = sum(scored.scores.values()) / n
    if abs(mean - scored.value) > 1e-9:
        return f"{fixed(100 * scored.value, 1)} ({scored.metric}) n={n}"
    return interval_cell(scored.value, mean_interval(list(scored.scores.values())), n)


def interval_cell(value: float, interval: tuple[float, float], n: int) -> str:
    """'83.1 [76.5, 88.9] n=160' from a mean score, its 95 % interval and n (fractions in, percentages out)."""
    low, high = interval
    return f"{fixed(100 * value, 1)} [{fixed(100 * low, 1)}, {fixed(100 * high, 1)}] n={n}"


def paired_cell(base: Scored, other: Scored) -> str:
    """`other` against `base` on the samples both scored: '-2.5 pts, p=0.29 (McNemar, n=160)'."""
    shared = sorted(base.scores.keys() & other.scores.keys())
    if not shared:
        return "no shared samples"
    result = compare_pairs("overall", [(base.scores[s], other.scores[s]) for s in shared], resamples=1000)
    test = "McNemar" if result.test == "mcnemar-exact" else "sign test"
    return f"{fixed(100 * result.difference, 1, sign=True)} pts, p={result.p_value:.2g} ({test}, n={result.n})"


def latest(runs: Iterable[RunRow], matches: Callable[[RunRow], bool]) -> RunRow | None:
    """The latest of `runs` (oldest first) that `matches`."""
    found = [r for r in runs if matches(r)]
    return found[-1] if found else None


# --- the grid of tables 6, 7 and 14 ------------------------------------------------------------------------------

# a column per prompt, and E and R with S2 (the small model re-answering after its own explanation or reasoning:
# the paper's E and R numbers for the small models are S2 numbers)
SCORE_COLUMNS = (("S", False), ("E", False), ("E", True), ("R", False), ("R", True))


def score_column(prompt: str, s2: bool) -> str:
    return prompt + (" +S2" if s2 else "")


def scores_grid(section: Section, group: SampleSet, singles: list[RunRow],
                scored: Callable[[str], Scored | None], paper: PaperTable | None = None,
                missing: Callable[[Callable[[RunRow], bool]], str] | None = None) -> None:
    """A row per model, a column per prompt without and with S2 (the paper's tables 6, 7 and 14): the latest
    single-model run of each in the group, with the paper's value beside the measured one of the same setting
    (the paper's E and R are S2 numbers, but MMMU's: `paper_uses_s2`). `missing`: why a cell has no run, from
    what a run of it would match (`Store.elsewhere`: stored over other samples, or not at all), as table 10 says it."""
    cells: dict[str, dict[str, RunRow]] = defaultdict(dict)
    for run in singles:  # oldest first: the latest run of a setting wins
        cells[run_models(run)][score_column(run["single_prompt"] or "", run["s2"])] = run
    if not cells:
        return
    columns = [score_column(p, s2) for p, s2 in SCORE_COLUMNS]
    beside = ("E +S2 and R +S2" if paper_uses_s2(group.benchmark, "E") else "E and R (its MMMU E and R are without S2)")
    table = Table(["model", *columns], [], f"{group_caption(group, singles)}: headline score %, 95 % interval, n" + (
        f"; the paper's value beside S and beside {beside}, the settings the paper measured" if paper else ""),
        group=group.key, scored=tuple(columns))
    for model, found in sorted(cells.items()):
        row: list[Cell] = [model]
        for prompt, s2 in SCORE_COLUMNS:
            chosen = found.get(score_column(prompt, s2))
            result = scored(chosen["run_id"]) if chosen else None
            if chosen is None or result is None:
                row.append(table.noted(DASH, f"{model} {score_column(prompt, s2)}: "
                                       + missing(_single_of(model, prompt, s2))) if missing else DASH)
                continue
            table.runs.append(chosen["run_id"])
            reference = (paper_value(paper, model, group.benchmark, prompt)
                         if paper and s2 == paper_uses_s2(group.benchmark, prompt) else None)
            row.append(score_cell(result) + (f" (paper {fixed(reference, 1)})" if reference is not None else ""))
        table.rows.append(row)
    section.tables.append(table)


def _single_of(model: str, prompt: str, s2: bool) -> Callable[[RunRow], bool]:
    """Whether a run is the single-model run of `model` with `prompt`, with or without S2."""
    return lambda r: (r["mode"] == "single" and run_models(r) == model and r["single_prompt"] == prompt
                      and r["s2"] == s2)
