"""`mai compare`: the exact test and the bootstrap by hand, then two real runs of a real store, whose per-sample
scores, categories and tokens are read here straight from the Parquet files (not through the views)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mai.errors import ConfigError
from mai.paired import bootstrap_mean_diff_ci, compare_pairs, mcnemar_exact_p
from tests.report_store import Store, report_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, prefect_server: str, assets_home: Path,
          shapes_dataset: Path) -> Store:
    return report_store(tmp_path_factory, assets_home, shapes_dataset)


def test_exact_mcnemar_by_hand() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(5, 0) == 2 / 32                      # 2 * P(X <= 0), X ~ Bin(5, 1/2)
    assert mcnemar_exact_p(2, 7) == 2 * (1 + 9 + 36) / 512      # 2 * P(X <= 2), X ~ Bin(9, 1/2) = 0.1797
    assert mcnemar_exact_p(7, 2) == mcnemar_exact_p(2, 7)       # two-sided: symmetric
    assert mcnemar_exact_p(1, 10) == 2 * (1 + 11) / 2048
    assert mcnemar_exact_p(3, 3) == 1.0 and mcnemar_exact_p(4, 3) == 1.0  # capped at 1
    assert mcnemar_exact_p(0, 200) == pytest.approx(2 / 2 ** 200, rel=1e-12)  # no overflow on large counts


def test_paired_counts_and_bootstrap_interval() -> None:
    # 100 pairs: 20 where only B is right, 5 where only A is, 50 both right, 25 neither
    pairs = [(0.0, 1.0)] * 20 + [(1.0, 0.0)] * 5 + [(1.0, 1.0)] * 50 + [(0.0, 0.0)] * 25
    result = compare_pairs("overall", pairs)
    assert (result.n, result.better, result.worse, result.test) == (100, 20, 5, "mcnemar-exact")
    assert result.mean_a == 0.55 and result.mean_b == 0.70 and result.difference == pytest.approx(0.15)
    hand = 2 * sum(math.comb(25, k) for k in range(6)) / 2 ** 25
    assert result.p_value == pytest.approx(hand, rel=1e-12) and result.p_value < 0.01
    # the difference's standard error is sqrt((20 + 5) / 100 - 0.15^2) / 10 = 0.0477: a 95 % interval of about
    # +-1.96 of it around 0.15, reproducible for a seed
    assert result.ci_low == pytest.approx(0.15 - 1.96 * 0.0477, abs=0.015)
    assert result.ci_high == pytest.approx(0.15 + 1.96 * 0.0477, abs=0.015)
    assert (result.ci_low, result.ci_high) == bootstrap_mean_diff_ci([b - a for a, b in pairs])
    assert bootstrap_mean_diff_ci([0.5] * 7) == (0.5, 0.5)
    graded = compare_pairs("overall", [(0.5, 0.75), (1.0, 0.0), (0.2, 0.2)])
    assert (graded.better, graded.worse, graded.test, graded.p_value) == (1, 1, "sign", 1.0)


def _parquet_routes(home: Path, run_id: str) -> dict[str, dict[str, Any]]:
    rows = pq.read_table(home / "store" / "routes" / run_id / "routes.parquet").to_pylist()
    return {r["sample_id"]: r for r in rows}


def _parquet_output_tokens(home: Path) -> dict[str, int]:
    files = sorted((home / "store" / "generations").glob("*/*/*.parquet"))
    return {r["gen_id"]: r["output_tokens"] for f in files
            for r in pq.read_table(f, columns=["gen_id", "output_tokens"]).to_pylist()}


@pytest.mark.prefect
def test_compare_two_real_runs_against_the_stored_files(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    from mai.cli import main

    run_a, run_b = store.runs["small_s"], store.runs["cascade"]
    assert main(["--home", str(store.home), "compare", run_a, run_b, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)

    a, b = _parquet_routes(store.home, run_a), _parquet_routes(store.home, run_b)
    assert result["paired"] == len(a) == len(b) == 16
    better = sorted(s for s in a if b[s]["score"] > a[s]["score"])
    worse = sorted(s for s in a if b[s]["score"] < a[s]["score"])
    assert better, "the trained cascade should beat the small model's S answers on some samples"
    overall = result["comparisons"][0]
    assert overall["subset"] == "overall"
    assert (overall["better"], overall["worse"]) == (len(better), len(worse))
    n = len(better) + len(worse)
    by_hand = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(len(better), len(worse)) + 1)) / 2 ** n)
    assert overall["p_value"] == pytest.approx(by_hand, rel=1e-12)
    assert overall["mean_a"] == pytest.approx(sum(r["score"] for r in a.values()) / 16)
    assert overall["mean_b"] == pytest.approx(sum(r["score"] for r in b.values()) / 16)
    assert overall["ci_low"] <= overall["difference"] <= overall["ci_high"]
    assert sorted(c["sample_id"] for c in result["changed"]) == sorted(better + worse)

    for category in {r["category"] for r in a.values()}:
        ids = [s for s in a if a[s]["category"] == category]
        row = next(c for c in result["comparisons"] if c["subset"] == f"category={category}")
        assert row["n"] == len(ids)
        assert row["better"] == sum(b[s]["score"] > a[s]["score"] for s in ids)
        assert row["worse"] == sum(b[s]["score"] < a[s]["score"] for s in ids)

    # tokens of the generations each run used, and the equation-27 estimates of both runs
    tokens = _parquet_output_tokens(store.home)
    stages = ("s_large", "s_small", "r_small", "s2_small", "rt_large", "single", "single_s2")
    for routes, key in ((a, "output_tokens_a"), (b, "output_tokens_b")):
        used = sum(tokens[r[f"gen_{stage}"]] for r in routes.values() for stage in stages if r[f"gen_{stage}"])
        assert result["cost"][key] == used
    # estimates are named after their profiles ('h100-2b' for the small model's run, 'h100-2b+h100-8b' for the
    # cascade's) and pair by the models they price: A's small model with h100-2b in both
    estimates = [(e["estimate_name"], e["estimate_b"]) for e in result["cost"]["estimates"]]
    assert estimates == [("h100-2b", "h100-2b+h100-8b")]
    totals = {name: next(r["total_s"] for r in pq.read_table(
        store.home / "store" / "estimates" / run / f"{name}.parquet").to_pylist() if r["stage"] == "total")
        for run, name in ((run_a, "h100-2b"), (run_b, "h100-2b+h100-8b"))}
    assert result["cost"]["estimates"][0]["seconds_a"] == pytest.approx(totals["h100-2b"])
    assert result["cost"]["estimates"][0]["seconds_b"] == pytest.approx(totals["h100-2b+h100-8b"])
    assert "S=12" in result["run_a"]["provenance"] and "scorer profile" in result["run_b"]["provenance"]
    for run_id, key in ((run_a, "run_a"), (run_b, "run_b")):  # what the run recorded, read from its own file
        (stored,) = pq.read_table(store.home / "store" / "runs" / run_id / "run.parquet").to_pylist()
        recorded, line = json.loads(stored["provenance_json"]), result[key]["provenance"]
        assert f"data {stored['dataset_fingerprint']}, split " in line and f"n={stored['n_samples']}" in line
        assert f"command {recorded['command']};" in line
        assert f"machine {recorded['machine']['host']}: {recorded['machine']['hardware']}; load " in line
        for model in recorded["models"].values():  # the weights fingerprint of each model
            assert model["revision"].startswith("sha256:") and f"{model['name']}@{model['revision']} (" in line

    assert main(["--home", str(store.home), "compare", run_a, run_b]) == 0
    text = capsys.readouterr().out
    assert result["run_a"]["provenance"] in text and result["run_b"]["provenance"] in text
    assert f"{overall['p_value']:.3g}" in text and "16 paired samples" in text
    assert "estimated time (A h100-2b, B h100-2b+h100-8b" in text and "float32, transformers" in text


@pytest.mark.prefect
def test_compare_refuses_unknown_runs(store: Store) -> None:
    from mai import api

    with pytest.raises(ConfigError, match="no completed run 'nope'"):
        api.compare(store.runs["cascade"], "nope", home=store.home)
