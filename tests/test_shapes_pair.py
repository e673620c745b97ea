"""The trained shapes pair (shipped weights) through the real pipeline: `mai demo` runs the cascade with answers in
the trained formats, and the regression flow passes a rerun and catches a worse pair (the random-weight one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mai.config import SHAPES_MAX_NEW_TOKENS, RunConfig, shapes_pair_config

pytestmark = pytest.mark.prefect

LIMIT = 32


@pytest.mark.usefixtures("shapes_dataset")
def test_demo_runs_the_trained_pair_and_the_regression_flow_guards_it(home: Path, tmp_path: Path) -> None:
    from mai.cli import main
    from mai.flows.regression import mai_regression
    from mai.run.baseline import RegressionDetected
    from mai.storage.catalog import query
    from mai.storage.paths import Home

    assert main(["--home", str(home), "demo", "--limit", str(LIMIT)]) == 0
    _, rows = query(Home.at(home), "SELECT run_id FROM runs WHERE run_name = 'demo'")
    (demo_run,), = rows
    _, metric = query(Home.at(home), f"SELECT value FROM metrics WHERE run_id = '{demo_run}' "
                                     "AND metric = 'unparsed_rate' AND subset = 'overall'")
    assert metric[0][0] <= 0.1  # trained formats: the answers parse (random weights: mostly unparseable)
    _, routes = query(Home.at(home), f"SELECT route, count(*) FROM routes WHERE run_id = '{demo_run}' GROUP BY 1")
    assert dict(routes)["MV1"] > 0 and sum(dict(routes).values()) == LIMIT

    # an identical rerun against the demo run: nothing to regress (and nothing recomputed)
    same = mai_regression(shapes_pair_config(home=str(home), limit=LIMIT, run_name="rerun"), baseline=demo_run)
    assert not same["regressed"] and "no regression" in same["report"]

    # the random-weight pair in place of the trained one: a real drop, caught per sample and the flow fails
    worse = RunConfig(home=str(home), benchmark="shapes", limit=LIMIT, max_new_tokens=SHAPES_MAX_NEW_TOKENS)
    with pytest.raises(RegressionDetected, match="REGRESSION"):
        mai_regression(worse, baseline=demo_run)

    # a baseline file round-trips, and the CLI exits 1 on a regression, 0 without one
    baseline = tmp_path / "baseline.json"
    assert main(["--home", str(home), "baseline", demo_run, "--out", str(baseline)]) == 0
    assert main(["--home", str(home), "regress", "--limit", str(LIMIT), "--baseline", str(baseline)]) == 0
    # (the random pair at the budgets of `worse` above: its stored outputs, not the general budgets' 1024-token
    # reasoning computed again)
    assert main(["--home", str(home), "regress", "--limit", str(LIMIT), "--baseline", str(baseline),
                 "--small-model", "mai-tiny-small", "--large-model", "mai-tiny-large",
                 *[f"--max-new-tokens={kind}={n}" for kind, n in SHAPES_MAX_NEW_TOKENS.items()]]) == 1
    assert main(["--home", str(home), "regress", "--baseline", "no-such-run"]) == 2

    # a baseline whose items are not this data's (the benchmark was regenerated since): refused, never paired
    written = json.loads(baseline.read_text())
    assert sorted(written["contents"]) == sorted(written["samples"])  # every scored sample's content is kept
    written["contents"][min(written["contents"])] = "another item"
    stale = tmp_path / "stale-baseline.json"
    stale.write_text(json.dumps(written))
    assert main(["--home", str(home), "regress", "--limit", str(LIMIT), "--baseline", str(stale)]) == 2
