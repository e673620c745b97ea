"""The paper's InternVL3.5 numbers (tables 13 and 14) as the report shows them beside the measured ones: every cell
transcribed, spot-checked against the paper's text, and looked up by the names users give those models."""

from __future__ import annotations

from typing import cast

import pytest

from mai.dashboards.charts import Section
from mai.dashboards.groups import SampleSet, Scored, scores_grid
from mai.dashboards.paper_internvl import (
    BENCHMARKS,
    PROMPTS,
    TABLE_13_TOKENS,
    TABLE_14_SCORES,
    paper_uses_s2,
    paper_value,
    reference_table,
)
from mai.dashboards.paper_tables import _with_paper
from mai.storage.rows import RunRow

MODELS = ["InternVL3.5-1B", "InternVL3.5-2B", "InternVL3.5-4B", "InternVL3.5-8B", "InternVL3.5-14B"]


@pytest.mark.parametrize("table", [TABLE_13_TOKENS, TABLE_14_SCORES], ids=["table-13", "table-14"])
def test_every_model_has_a_value_per_benchmark_and_prompt(table: dict[str, tuple[float, ...]]) -> None:
    assert list(table) == MODELS
    assert {len(values) for values in table.values()} == {len(BENCHMARKS) * len(PROMPTS)}
    assert len(reference_table(table, "x").rows) == len(MODELS)


@pytest.mark.parametrize(("table", "model", "benchmark", "prompt", "value"), [
    (TABLE_13_TOKENS, "InternVL3.5-8B", "mmmu", "R", 385.5),
    (TABLE_13_TOKENS, "InternVL3.5-2B", "mmmu", "S", 262.2),
    (TABLE_13_TOKENS, "InternVL3.5-1B", "realworldqa", "R", 69.5),
    (TABLE_14_SCORES, "InternVL3.5-14B", "infovqa", "R", 77.1),
    (TABLE_14_SCORES, "InternVL3.5-4B", "realworldqa", "R", 42.6),
    (TABLE_14_SCORES, "InternVL3.5-1B", "pope", "S", 83.8),
])
def test_values_match_the_paper(table: dict[str, tuple[float, ...]], model: str, benchmark: str, prompt: str,
                                value: float) -> None:
    assert paper_value(table, model, benchmark, prompt) == value


def test_models_are_found_by_hub_id_and_checkpoint_directory() -> None:
    assert paper_value(TABLE_13_TOKENS, "OpenGVLab/InternVL3.5-8B-HF", "mmmu", "R") == 385.5
    assert paper_value(TABLE_13_TOKENS, "OpenGVLab/InternVL3_5-8B-HF", "mmmu", "R") == 385.5  # the real hub id
    assert paper_value(TABLE_14_SCORES, "/ckpt/InternVL3_5-14B-HF", "infovqa", "R") == 77.1
    assert paper_value(TABLE_13_TOKENS, "/ckpt/InternVL3.5-8B-HF/", "mmmu", "R") == 385.5
    assert paper_value(TABLE_13_TOKENS, "opengvlab/internvl3_5-8b-hf", "mmmu", "R") == 385.5  # any case
    assert paper_value(TABLE_13_TOKENS, "/ckpt/INTERNVL3.5-8B", "mmmu", "R") == 385.5
    assert paper_value(TABLE_13_TOKENS, "mai-tiny-internvl-large", "mmmu", "R") is None
    assert paper_value(TABLE_13_TOKENS, "InternVL3.5-8B", "shapes", "R") is None


def test_a_measured_cell_shows_the_papers_value_beside_it() -> None:
    assert _with_paper(12.34, TABLE_13_TOKENS, "OpenGVLab/InternVL3.5-8B-HF", "pope", "S") == "12.3 (paper 1.1)"
    assert _with_paper(12.34, TABLE_13_TOKENS, "mai-tiny-internvl-large", "pope", "S") == "12.3"
    assert _with_paper(12.34, None, "InternVL3.5-8B", "pope", "S") == "12.3"


def _single(run_id: str, prompt: str, s2: bool) -> RunRow:
    return cast(RunRow, {"run_id": run_id, "run_name": None, "mode": "single", "single_model": "large",
                         "single_prompt": prompt,
                         "s2": s2, "small_model": None, "large_model": "OpenGVLab/InternVL3_5-8B-HF"})


@pytest.mark.parametrize(("benchmark", "beside"), [("pope", {"S": 88.6, "E +S2": 90.7, "R +S2": 88.5}),
                                                   ("mmmu", {"S": 56.8, "E": 60.9, "R": 60.2})])
def test_table_14_sets_the_papers_value_beside_the_setting_the_paper_measured(benchmark: str,
                                                                               beside: dict[str, float]) -> None:
    """The paper's table 14 E and R are S2 numbers but MMMU's (its dagger): the paper's value stands beside E +S2
    and R +S2, beside plain E and R for MMMU, and beside S; the other columns show the measured value alone."""
    assert [paper_uses_s2(benchmark, p) for p in PROMPTS] == [False, benchmark != "mmmu", benchmark != "mmmu"]
    runs = [_single(f"{p}{s2}", p, s2) for p in PROMPTS for s2 in (False, True) if p != "S" or not s2]
    section = Section("table-14", "Table 14", "")
    scores_grid(section, SampleSet(benchmark, "sha256:data", 2, "ids"), runs,
                lambda run_id: Scored(run_id, "accuracy", 0.5, {"a": 1.0, "b": 0.0}), TABLE_14_SCORES)
    (table,) = section.tables
    (row,) = table.rows
    cells = dict(zip(table.columns, row))
    assert cells["model"] == "OpenGVLab/InternVL3_5-8B-HF"
    for column in ("S", "E", "E +S2", "R", "R +S2"):
        paper = f" (paper {beside[column]:.1f})" if column in beside else ""
        assert str(cells[column]).endswith(f"n=2{paper}"), (column, cells[column])
    assert ("E +S2 and R +S2" in table.caption) == (benchmark != "mmmu")
