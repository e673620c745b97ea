"""Latency: profiling on simulated inputs, the equation-27 estimate of stored runs, speed-up tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai.backends.registry import loaded_engines
from mai.cli import main
from mai.dashboards.saved import load_saved
from mai.flows.profiles import mai_profile
from mai.latency_estimate import Call, LatencyProfile, estimate, ttft_at
from mai.run.estimate import estimate_run
from mai.storage.catalog import query
from mai.storage.latency import read_profile, read_run_calls, write_profile
from mai.storage.paths import Home
from tests.helpers import run

REPO = Path(__file__).resolve().parents[1]


def test_ttft_interpolates_and_extrapolates_linearly() -> None:
    profile = LatencyProfile("p", "m", ((100, 0.010), (300, 0.030), (300, 0.050), (500, 0.050)), tokens_per_s=50)
    assert ttft_at(profile, 200) == pytest.approx(0.025)   # between 100 -> 0.010 and 300 -> mean 0.040
    assert ttft_at(profile, 400) == pytest.approx(0.045)
    assert ttft_at(profile, 700) == pytest.approx(0.060)   # the last segment extended
    assert ttft_at(profile, 0) == pytest.approx(0.010)     # held at the shortest profiled input
    stages = estimate([Call("s", "m", 100, 10), Call("s", "m", 500, 5), Call("r", "m", 300, 100)], {"m": profile})
    assert [(s.stage, s.calls) for s in stages] == [("s", 2), ("r", 1)]
    assert stages[0].total_s == pytest.approx(0.010 + 0.2 + 0.050 + 0.1)


@pytest.mark.prefect
def test_profile_forces_exact_lengths_and_round_trips(home: Path) -> None:
    rows = mai_profile("mai-tiny-large", "tiny-large-cpu", resolutions=[64], query_tokens=[16, 64],
                       output_tokens=[4, 32], repeats=2, home=str(home))
    assert [(r["query_tokens"], r["output_tokens"]) for r in rows] == [(16, 4), (16, 32), (64, 4), (64, 32)]
    assert all(r["image_tokens"] == 4 and r["ttft_ms"] > 0 and r["vision_ms"] > 0 for r in rows)
    for short, long in ((rows[0], rows[1]), (rows[2], rows[3])):
        assert long["decode_ms"] > short["decode_ms"]
    assert rows[2]["input_tokens"] - rows[0]["input_tokens"] == 48
    _, stored = query(Home.at(home), "SELECT count(*), min(output_tokens), max(output_tokens), any_value(hardware) "
                                     "FROM latency_profiles WHERE profile_name = 'tiny-large-cpu'")
    assert stored[0][:3] == (4, 4, 32) and stored[0][3]
    profile = read_profile(Home.at(home), "tiny-large-cpu")
    assert profile.tokens_per_s > 0 and len(profile.ttft_points) == 4
    with pytest.raises(Exception, match="exists"):
        mai_profile("mai-tiny-large", "tiny-large-cpu", [64], [16], [4], 1, home=str(home))


def test_estimate_equals_the_hand_computation_and_runs_no_model(home: Path) -> None:
    cascade = run(home)
    write_profile(Home.at(home), "hand-small", [_row("mai-tiny-small", 20, 10.0, 100.0), _row("mai-tiny-small", 220, 30.0, None)])
    write_profile(Home.at(home), "hand-large", [_row("mai-tiny-large", 20, 40.0, 25.0)])
    before = {id(e): e.counters.generations for e in loaded_engines()}
    stages = estimate_run(cascade["run_id"], {"mai-tiny-small": "hand-small", "mai-tiny-large": "hand-large"}, "hand",
                          str(home))
    assert {id(e): e.counters.generations for e in loaded_engines()} == before
    by_hand = 0.0
    for call in read_run_calls(Home.at(home), cascade["run_id"]):
        if call.model == "mai-tiny-small":
            ttft = 0.010 + (0.030 - 0.010) * (call.prompt_tokens - 20) / 200
            by_hand += ttft + call.output_tokens / 100.0
        else:
            by_hand += 0.040 + call.output_tokens / 25.0
    assert round(sum(s["total_s"] for s in stages), 3) == round(by_hand, 3)
    calls = {s["stage"]: s["calls"] for s in stages}
    assert calls["s_large"] == calls["s_small"] == 24 and calls["rt_large"] == cascade["routes"]["RT"]

    large_r = run(home, mode="single", single_model="large", single_prompt="R")
    assert main(["--home", str(home), "estimate", large_r["run_id"], "--large-profile", "hand-large",
                 "--name", "hand"]) == 0
    columns, rows = query(Home.at(home), load_saved("speedup"))
    table = {r[columns.index("setting")]: dict(zip(columns, r)) for r in rows if r[columns.index("estimate_name")]}
    assert table["large R"]["estimated_speedup_vs_large_r"] == pytest.approx(1.0)
    assert table["MAI"]["estimated_s"] == pytest.approx(sum(s["total_s"] for s in stages))
    assert table["MAI"]["measured_s"] > 0
    _, costs = query(Home.at(home), load_saved("stage_costs"))
    assert {r[1] for r in costs} >= {"s_large", "s_small", "r_small", "rt_large", "single"}


def test_import_published_profile(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = REPO / "docs" / "paper_latency_h100.csv"
    assert main(["--home", str(home), "import-profile", str(csv), "--name", "h100-8b"]) == 2  # several models
    assert main(["--home", str(home), "import-profile", str(csv), "--name", "h100-8b", "--model", "Qwen3-VL-8B"]) == 0
    profile = read_profile(Home.at(home), "h100-8b")
    assert profile.tokens_per_s == pytest.approx(47.26)
    assert ttft_at(profile, 1536) == pytest.approx(0.11531)


def _row(model: str, input_tokens: int, ttft_ms: float, tokens_per_s: float | None) -> dict[str, object]:
    return {"model": model, "backend": "hand", "dtype": "float32", "hardware": "hand-written", "source": "imported",
            "input_tokens": input_tokens, "ttft_ms": ttft_ms, "tokens_per_s": tokens_per_s}
