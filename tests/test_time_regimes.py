"""A measured speed-up divides only times taken in one regime (docs/latency.md). On a store where MAI's small-R
outputs were computed by the MAI run at batch 8 and the rest of Full RT's by a small-R run at batch 2, Full RT's
stored time mixes two batch regimes: tables 11 and 12 show no measured speed-up that mixes them, but the estimate
(equation 27), marked, with the reason in a footnote; table 12 shows the realised batch sizes and the load (start,
end, max). After `mai time` over both runs, the speed-up comes from the timing set, with "identical n of n"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mai import api
from mai.dashboards.charts import Section, Table
from mai.dashboards.latency_section import latency
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import read_store
from mai.errors import ConfigError
from mai.storage.catalog import query
from mai.storage.paths import Home
from tests.helpers import run

REPO = Path(__file__).resolve().parents[1]
LIMIT = 12


def child(section: Section, key: str) -> Section:
    (found,) = [c for c in section.children if c.key == key]
    return found


def latency_of(home: Path) -> Section:
    """The latency section as the report reads it from the store now (read once per state of the store: a read
    takes about a second)."""
    return latency(read_store(Home.at(home), None))


def measured_table_11(section: Section) -> Table:
    (table,) = [t for t in child(section, "table-11").tables if t.columns[0] == "measured (wall time)"]
    return table


def cell(table: Table, row: str, run_id: str) -> str:
    """Table 11's cell in `row` under the column of the MAI run `run_id` (its "MAI run" row names it)."""
    (runs,) = [r for r in table.rows if r[0] == "MAI run"]
    (found,) = [r for r in table.rows if r[0] == row]
    return str(found[runs.index(run_id)])


def test_a_speedup_over_outputs_timed_in_two_batch_regimes_is_an_estimate_until_mai_time(home: Path) -> None:
    mai = run(home, limit=LIMIT)["run_id"]  # computes its small-R outputs at batch 8
    small_r = run(home, limit=LIMIT, mode="single", single_model="small", single_prompt="R", batch_size=2)["run_id"]
    full_rt = run(home, limit=LIMIT, mode="full_rt")["run_id"]  # reuses both runs' small-R outputs
    large_r = run(home, limit=LIMIT, mode="single", single_model="large", single_prompt="R")["run_id"]
    csv = REPO / "docs" / "paper_latency_h100.csv"
    api.import_profile(csv, "h100-2b", model="Qwen3-VL-2B", home=home)
    api.import_profile(csv, "h100-8b", model="Qwen3-VL-8B", home=home)
    for run_id in (mai, full_rt, large_r):
        api.estimate(run_id, small_profile="h100-2b", large_profile="h100-8b", home=home)
    _, batches = query(Home.at(home), f"SELECT DISTINCT g.run_id, g.batch_size FROM routes r JOIN generations g "
                                      f"ON g.gen_id = r.gen_r_small WHERE r.run_id = '{full_rt}'")
    assert {run_id for run_id, _ in batches} == {mai, small_r}  # Full RT's small-R outputs: two runs' times
    assert {size for run_id, size in batches if run_id == small_r} <= {1, 2}

    column = mai
    section = latency_of(home)
    table = measured_table_11(section)
    speedup = cell(table, "Speedup", column)
    (row,) = [r for r in _speedup_rows(home) if r["run_id"] == mai]
    assert row["measured_speedup_vs_full_rt"] is None and row["full_rt_mixed"].startswith("times reused from other")
    # the cell holds the estimate, marked; why, and the command that measures it, are its footnote (once)
    assert speedup == f"{row['estimated_speedup_vs_full_rt']:.2f}x¹" and len(table.footnotes) == 1
    (note,) = table.footnotes
    assert note.startswith("estimate (equation 27, h100-2b+h100-8b), not measured")
    assert "not one regime (times reused from other runs (" in note
    assert f"`mai time {mai} {full_rt}` re-times both" in note
    assert cell(table, "MAI (s)", column) == f"{row['estimated_s']:.2f}¹"  # no mixed number: the estimate's

    (table_12,) = [t for t in child(section, "table-12").tables if "batch size (realised)" in t.columns]
    mai_row = next(r for r in table_12.rows if r[table_12.columns.index("run")] == mai)
    assert re.fullmatch(r"r_small [\d/]+, rt_large [\d/]+, s_large [\d/]+, s_small [\d/]+ \(limits S=8 R=8 S2=8 RT=8\)",
                        str(mai_row[table_12.columns.index("batch size (realised)")]))
    load = (str(mai_row[table_12.columns.index("load (1 min)")]) if "load (1 min)" in table_12.columns else
            next(n for n in table_12.footnotes if n.startswith("load (1 min), every row: ")).split(": ", 1)[1])
    assert re.match(r"start [\d.]+, end [\d.]+, max [\d.]+", load)  # said once when every row's is the same
    stored = query(Home.at(home), f"SELECT count(*) FROM generations WHERE host IS NOT NULL AND device = 'cpu' AND "
                                  f"engine LIKE 'transformers %' AND load_start IS NOT NULL AND run_id = '{mai}'")
    assert stored[1][0][0] > 0  # every new row says how its time was measured

    with pytest.raises(ConfigError, match="batch R prompts by \\[2, 8\\]"):
        api.time_runs([mai, small_r], home=home)  # one timing set batches alike
    summary = api.time_runs([mai, full_rt], name="both", home=home)
    assert [r["run_id"] for r in summary["runs"]] == [mai, full_rt]
    assert all(r["identical"] == r["outputs"] > 0 for r in summary["runs"])
    outputs = sum(r["outputs"] for r in summary["runs"])
    table = measured_table_11(latency_of(home))
    speedup = cell(table, "Speedup", column)
    timed = {r["run_id"]: r["measured_s"] for r in summary["runs"]}
    assert speedup == f"{timed[full_rt] / timed[mai]:.2f}x"
    source = cell(table, "measured on", column)
    assert source.startswith("timing set both (") and source.endswith(f"identical {outputs} of {outputs}")
    _, regimes = query(Home.at(home), "SELECT count(DISTINCT batch_limits), count(DISTINCT host), min(identical) "
                                      "FROM timings WHERE timing_set = 'both'")
    assert regimes == [(1, 1, True)]
    _, kept = query(Home.at(home), f"SELECT count(*) FROM generations WHERE run_id = '{small_r}'")
    assert kept[0][0] > 0  # the stored outputs and their times stay as they were


def _speedup_rows(home: Path) -> list[dict[str, object]]:
    columns, rows = query(Home.at(home), load_saved("speedup"))
    return [dict(zip(columns, r)) for r in rows if dict(zip(columns, r))["estimate_name"] == "h100-2b+h100-8b"
            or dict(zip(columns, r))["setting"] == "large R"]
