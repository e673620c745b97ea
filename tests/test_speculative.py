"""Speculative decoding baseline: the draft sees the image and the output is the large model's greedy output."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai import api
from mai.config import RunConfig
from mai.flows.speculative import mai_speculative
from mai.storage.catalog import query
from mai.storage.paths import Home
from tests.helpers import BUDGET

pytestmark = pytest.mark.prefect


def test_speculative_decoding_is_token_identical_and_records_acceptance(home: Path) -> None:
    config = RunConfig(home=str(home), limit=8, shards=1, max_new_tokens={**BUDGET, "R": 32})
    summary = api.speculative(config, draft_tokens=4, progress=False, local=True)  # in this process
    assert summary["samples"] == 8 and summary["identical"] == 8
    assert 0.0 <= summary["acceptance_rate"] <= 1.0
    _, rows = query(Home.at(home), "SELECT count(*), bool_and(identical_to_greedy), sum(proposed) >= sum(accepted), "
                                   "bool_and(acceptance_rate BETWEEN 0 AND 1), min(speculative_wall_s) > 0 "
                                   "FROM speculative")
    assert rows == [(8, True, True, True, True)]
    again = mai_speculative(config, draft_tokens=2)  # the flow finds the reference outputs stored
    assert again["identical"] == 8
    _, computed = query(Home.at(home), "SELECT n_generations_computed FROM runs ORDER BY started_at")
    assert computed == [(8,), (0,)]  # the reference large-model R outputs are reused by the second call
