"""The paper's InternVL3.5 numbers (tables 13 and 14) as the report shows them beside the measured ones: every cell
transcribed, spot-checked against the paper's text, and looked up by the names users give those models."""

from __future__ import annotations

import pytest
from mai.dashboards.paper_internvl import (
    BENCHMARKS,
    PROMPTS,
    TABLE_13_TOKENS,
    TABLE_14_SCORES,
    paper_value,
    reference_table,
)
from mai.dashboards.paper_tables import _with_paper

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
    assert paper_value(TABLE_13_TOKENS, "mai-tiny-internvl-large", "mmmu", "R") is None
    assert paper_value(TABLE_13_TOKENS, "InternVL3.5-8B", "shapes", "R") is None


def test_a_measured_cell_shows_the_papers_value_beside_it() -> None:
    assert _with_paper(12.34, TABLE_13_TOKENS, "OpenGVLab/InternVL3.5-8B-HF", "pope", "S") == "12.3 (paper 1.1)"
    assert _with_paper(12.34, TABLE_13_TOKENS, "mai-tiny-internvl-large", "pope", "S") == "12.3"
    assert _with_paper(12.34, None, "InternVL3.5-8B", "pope", "S") == "12.3"
