"""The saved queries that compare runs pair them by the exact set of sample contents and every setting but the
one compared, on a store built for it: runs over other samples (a smaller limit), other token budgets or another
transfer mode never pair (pairing by dataset and models only would set a sparse-RT or other-budget run against a
full-transfer one, and a speed-up against a large-R run over other samples)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mai.dashboards.saved import load_saved
from mai.run.estimate import estimate_run
from mai.storage.catalog import query
from mai.storage.latency import write_profile
from mai.storage.paths import Home
from tests.helpers import BUDGET, run


def rows(home: Path, name: str) -> list[dict[str, Any]]:
    return select(home, load_saved(name))


def select(home: Path, sql: str) -> list[dict[str, Any]]:
    columns, found = query(Home.at(home), sql)
    return [dict(zip(columns, row)) for row in found]


def measured_s(home: Path, run_id: str) -> float:
    """A run's measured time computed here, from the generations its routes name."""
    sql = f"""SELECT sum(g.wall_s / g.batch_size) FROM generations g WHERE g.gen_id IN (
                SELECT unnest([gen_s_large, gen_s_small, gen_r_small, gen_s2_small, gen_rt_large, gen_single,
                               gen_single_s2]) FROM routes WHERE run_id = '{run_id}')"""
    value = query(Home.at(home), sql)[1][0][0]
    assert isinstance(value, float)
    return value


def test_s2_and_speedup_pairs_on_a_store_built_for_it(home: Path) -> None:
    ids = {
        "A": run(home, limit=12)["run_id"],                                    # MAI
        "B": run(home, limit=12, s2=True)["run_id"],                           # MAI +S2: pairs with A
        "C": run(home, limit=6, s2=True)["run_id"],                            # other samples
        "D": run(home, limit=12, s2=True, max_new_tokens={**BUDGET, "R": 20})["run_id"],  # other budgets
        "E": run(home, limit=12, transfer="sparse", transfer_layer=1)["run_id"],  # other transfer, no S2
        "L12": run(home, limit=12, mode="single", single_model="large", single_prompt="R")["run_id"],
        "L24": run(home, limit=24, mode="single", single_model="large", single_prompt="R")["run_id"],
    }
    name = {run_id: label for label, run_id in ids.items()}

    pairs = rows(home, "s2_vs_non_s2")
    assert [(name[p["run_without_s2"]], name[p["run_with_s2"]]) for p in pairs] == [("A", "B")]
    assert pairs[0]["common_samples"] == 12

    write_profile(Home.at(home), "hand-small", [_profile("mai-tiny-small", 40.0, 200.0)])
    write_profile(Home.at(home), "hand-large", [_profile("mai-tiny-large", 80.0, 50.0)])
    profiles = {"mai-tiny-small": "hand-small", "mai-tiny-large": "hand-large"}
    totals = {label: sum(s["total_s"] for s in estimate_run(ids[label], profiles, "hand", str(home)) if s["stage"] != "total")
              for label in ("A", "L12", "L24")}

    table = {name[r["run_id"]]: r for r in rows(home, "speedup")}
    assert {label: name.get(r["large_r_run_id"]) for label, r in table.items()} == {
        "A": "L12", "B": "L12", "E": "L12", "L12": "L12", "L24": "L24", "C": None, "D": None}
    assert table["A"]["n_samples"] == 12 and table["L24"]["n_samples"] == 24
    assert table["A"]["estimated_speedup_vs_large_r"] == pytest.approx(totals["L12"] / totals["A"])
    if table["A"]["large_r_mixed"] is None:  # one regime (docs/latency.md): the ratio of the two stored times
        assert table["A"]["measured_speedup_vs_large_r"] == pytest.approx(measured_s(home, ids["L12"])
                                                                          / measured_s(home, ids["A"]))
    else:  # each computed its own outputs here at batch 8: only the machine's load can part them
        assert table["A"]["large_r_mixed"].startswith("load ") and table["A"]["measured_speedup_vs_large_r"] is None
    assert table["B"]["large_r_mixed"].startswith("times reused from other runs")  # B reuses A's outputs
    assert table["L12"]["measured_speedup_vs_large_r"] == pytest.approx(1.0)
    assert table["C"]["measured_speedup_vs_large_r"] is None and table["D"]["estimated_speedup_vs_large_r"] is None


def _profile(model: str, ttft_ms: float, tokens_per_s: float) -> dict[str, object]:
    return {"model": model, "backend": "hand", "dtype": "float32", "hardware": "hand-written", "source": "imported",
            "input_tokens": 100, "ttft_ms": ttft_ms, "tokens_per_s": tokens_per_s}


def test_sparse_time_counts_the_capture_pass_of_its_layer(home: Path) -> None:
    """A sparse-RT run's measured time is its generations' wall time plus, per capture its selections read, the
    capture_s of the pass that captured the selection's layer: a later sweep layer adds its layer to the same
    captures in a pass of its own, which that run counts (not the earlier pass). Its estimate prices each capture
    as one TTFT of the large model at the capture's input length (equation 27), and its timed runs are the runs
    that computed what it adds up."""
    first = run(home, limit=6, transfer="sparse", transfer_layer=1)["run_id"]
    second = run(home, limit=6, transfer="sparse", transfer_layer=2)["run_id"]
    passes = {(r["capture_id"], r["layer"]): (r["capture_s"], r["run_id"]) for r in select(home, """
        SELECT capture_id, layer, capture_s, run_id FROM attention""")}
    layers = {layer for _, layer in passes}
    assert layers == {1, 2}
    table = {r["run_id"]: r for r in rows(home, "speedup")}
    for run_id, layer in ((first, 1), (second, 2)):
        read = select(home, f"""SELECT s.capture_id FROM routes r JOIN generations g ON g.gen_id = r.gen_rt_large
                              JOIN selections s ON s.selection_id = g.upstream_gen_id WHERE r.run_id = '{run_id}'""")
        assert read and all(passes[(c["capture_id"], layer)][1] == run_id for c in read)  # each layer its own pass
        captures = sum(passes[(c["capture_id"], layer)][0] for c in read)
        assert captures > 0
        assert table[run_id]["measured_s"] == pytest.approx(measured_s(home, run_id) + captures)
        computed = {r["run_id"] for r in select(home, f"""SELECT DISTINCT g.run_id FROM generations g WHERE g.gen_id IN (
            SELECT unnest([gen_s_large, gen_s_small, gen_r_small, gen_rt_large]) FROM routes
            WHERE run_id = '{run_id}')""")}
        assert set(table[run_id]["timed_runs"]) == computed | {run_id} and first in table[second]["timed_runs"]

        write_profile(Home.at(home), f"flat-large-{layer}", [_profile("mai-tiny-large", 80.0, 50.0)])
        write_profile(Home.at(home), f"flat-small-{layer}", [_profile("mai-tiny-small", 40.0, 200.0)])
        stages = {s["stage"]: s for s in estimate_run(run_id, {"mai-tiny-small": f"flat-small-{layer}",
                                                                "mai-tiny-large": f"flat-large-{layer}"},
                                                      "flat", str(home))}
        assert stages["capture"]["calls"] == len(read) and stages["capture"]["decode_s"] == 0
        assert stages["capture"]["total_s"] == pytest.approx(0.080 * len(read))  # a one-point profile: TTFT 80 ms
    priced = {r["run_id"]: r for r in rows(home, "speedup") if r["estimate_name"] == "flat"}
    assert priced[first]["estimate_excludes_capture"] is False
    assert "mai-tiny-large=flat-large-1" in priced[first]["prices"]
