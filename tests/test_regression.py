"""The regression check: paired per-sample comparison, a sign test, per-category checks, missing samples, and
no pairing of a baseline with other items."""

from __future__ import annotations

import pytest

from mai.errors import ConfigError
from mai.regression import check_same_items, compare_runs, sign_test_p


def scores(values: dict[str, list[float]]) -> dict[str, tuple[str, float | None]]:
    return {f"{category}-{i}": (category, v) for category, vs in values.items() for i, v in enumerate(vs)}


def test_sign_test_is_exact() -> None:
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == 1 / 32
    assert abs(sign_test_p(3, 1) - 5 / 16) < 1e-12


def test_identical_runs_do_not_regress() -> None:
    base = scores({"a": [1, 0, 1, 1] * 25, "b": [1, 1, 0, 0] * 25})
    verdict = compare_runs(base, dict(base))
    assert not verdict.regressed and all(c.drop_points == 0 for c in verdict.comparisons)


def test_a_collapsed_category_is_caught_even_when_overall_looks_fine() -> None:
    base = scores({"a": [1] * 20 + [0] * 180, "b": [1] * 60})
    candidate = scores({"a": [1] * 20 + [0] * 180, "b": [1] * 48 + [0] * 12})  # b: 12 of 60 samples lost
    verdict = compare_runs(base, candidate, min_drop_points=5.0)
    by_subset = {c.subset: c for c in verdict.comparisons}
    assert not by_subset["overall"].regressed  # 4.6 points: below the 5-point threshold
    assert by_subset["category=b"].regressed and by_subset["category=b"].worse == 12
    assert verdict.regressed


def test_noise_is_not_a_regression() -> None:
    base = scores({"a": [1, 0] * 50})
    # three samples got worse, one better: a 2-point drop, but not significant (p = 5/16)
    candidate = dict(base)
    for sid in ("a-0", "a-2", "a-4"):
        candidate[sid] = ("a", 0.0)
    candidate["a-1"] = ("a", 1.0)
    verdict = compare_runs(base, candidate)
    assert verdict.comparisons[0].drop_points == 2.0 and not verdict.regressed


def test_samples_the_candidate_lost_fail_the_check() -> None:
    base = scores({"a": [1, 1, 0]})
    candidate = {"a-0": ("a", 1.0), "a-1": ("a", None)}  # a-1 errored, a-2 missing
    verdict = compare_runs(base, candidate)
    assert verdict.missing == ("a-1", "a-2") and verdict.regressed


def test_a_baseline_over_other_items_is_refused_not_paired() -> None:
    baseline = {"s-0": "aaa", "s-1": "bbb"}
    check_same_items("base.json", baseline, {"s-0": "aaa", "s-1": "bbb", "s-2": "ccc"})  # the same items
    check_same_items("base.json", baseline, {"s-0": "aaa"})  # a lost sample is compare_runs' to report
    with pytest.raises(ConfigError, match=r"1 samples of baseline base.json hold other items .*s-1"):
        check_same_items("base.json", baseline, {"s-0": "aaa", "s-1": "zzz"})
