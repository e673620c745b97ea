"""`mai regress` over fewer samples than its baseline (`--limit`): the comparison is over the shared samples with a
warning naming how many baseline samples the run does not hold (not a REGRESSION with identical numbers);
`--require-all` makes them fail the check; a baseline sample that is an error in the run always fails it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai.cli import main
from mai.regression import compare_runs
from tests.helpers import BUDGET, run

DEMO = ["--benchmark", "demo", "--small-model", "mai-tiny-small", "--large-model", "mai-tiny-large", "--shards", "1",
        *[f"--max-new-tokens={k}={v}" for k, v in BUDGET.items()]]


def test_absent_samples_are_a_warning_unless_all_are_required() -> None:
    base = {f"s-{i}": ("a", float(i % 2)) for i in range(10)}
    subset = {sid: base[sid] for sid in ("s-0", "s-1", "s-2")}
    verdict = compare_runs(base, subset)
    assert not verdict.regressed and len(verdict.absent) == 7 and verdict.comparisons[0].n == 3
    assert compare_runs(base, subset, require_all=True).regressed
    errored = {**subset, "s-3": ("a", None)}  # the run holds s-3, as an error
    verdict = compare_runs(base, errored)
    assert verdict.errored == ("s-3",) and verdict.regressed


def test_regress_with_a_smaller_limit_compares_the_shared_samples(home: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    baseline = run(home, limit=24, shards=1)["run_id"]
    assert main(["--home", str(home), "regress", "--baseline", baseline, "--limit", "8", *DEMO]) == 0
    captured = capsys.readouterr()
    assert "# no regression" in captured.out and "| overall | 8 |" in captured.out
    assert "warning: 16 of the baseline's samples are not in this run; compared over the 8 shared samples" in captured.err
    assert main(["--home", str(home), "regress", "--baseline", baseline, "--limit", "8", "--require-all", *DEMO]) == 1
    out = capsys.readouterr().out
    assert "# REGRESSION" in out and "16 baseline samples are not in this run and fail the check" in out


def test_regress_local_computes_what_its_run_lacks_with_no_prefect(home: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`mai regress --local` runs on the in-process executor: 4 of its 8 samples are not stored, and it computes
    them with no Prefect (this test's Prefect API is a closed port: a flow would fail), then compares."""
    baseline = run(home, limit=4, shards=1)["run_id"]
    assert main(["--home", str(home), "regress", "--local", "--baseline", baseline, "--limit", "8", *DEMO]) == 0
    assert "# no regression" in capsys.readouterr().out
