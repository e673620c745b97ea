"""`mai-regression`: run a configuration and fail when it is significantly worse than a baseline.

CI triggers it (`mai regress`, exit status 1 on a regression, or `prefect deployment run ... --watch`, which
exits 1 when the flow fails). The default configuration is the trained shapes pair's cascade on the shapes
test split; its default baseline is the shipped baseline file of that configuration
(`mai/assets/regression/shapes-cascade.json`). The comparison itself needs no Prefect (mai/run/baseline.py).
"""

from __future__ import annotations

from prefect import flow

from mai.config import RunConfig, shapes_pair_config
from mai.flows.artifacts import publish_regression
from mai.flows.run import mai_run
from mai.pipeline import HandedOver
from mai.plan import RunPlan
from mai.run.baseline import RegressionResult, default_baseline, judge, load_baseline
from mai.storage.paths import Home


@flow(name="mai-regression", persist_result=False)
def mai_regression(config: RunConfig | None = None, baseline: str | None = None, min_drop_points: float = 1.0,
                   alpha: float = 0.05, require_all: bool = False, plan: RunPlan | None = None,
                   resolved: HandedOver | None = None) -> RegressionResult:
    """Run `config` (default: the shapes pair's cascade), compare it with `baseline` (default: the shipped
    baseline file) over the samples both scored and fail the flow run on a significant drop; baseline samples the
    run does not hold are a warning, or a failure with `require_all`. `plan` and `resolved`: `config` already
    planned and resolved against the store (`mai.api.regress`; see `mai_run`)."""
    config = config or shapes_pair_config(run_name="regression")
    home = Home.at(config.home)
    chosen = load_baseline(home, baseline or str(default_baseline()))  # before the run: a missing one fails fast
    manifest = mai_run(config, plan, resolved)
    return judge(home, manifest["run_id"], chosen, min_drop_points, alpha, require_all, publish_regression)
