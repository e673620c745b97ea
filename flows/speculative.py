"""`mai-speculative`: the speculative-decoding baseline of paper table 12 (mai/run/speculative.py) as a flow, whose
reference run is the `mai-run` flow."""

from __future__ import annotations

from prefect import flow

from mai import stop
from mai.config import RunConfig
from mai.flows.fanout import check_workers
from mai.flows.run import mai_run
from mai.plan import RunPlan
from mai.run.plan import prepare_run
from mai.run.speculative import SpeculativeSummary, pair_config, speculative_baseline
from mai.storage.paths import Home


@flow(name="mai-speculative", persist_result=False)
def mai_speculative(config: RunConfig, draft_tokens: int = 4, plan: RunPlan | None = None) -> SpeculativeSummary:
    """`plan`: the pair's plan (`pair_config(config)` validated and resolved, as `mai.api.speculative` makes
    it); without it the flow makes it."""
    with stop.on_sigterm():
        if plan is None:
            plan = prepare_run(pair_config(config), Home.at(config.home))
            check_workers(config)
        return speculative_baseline(config, draft_tokens, plan, mai_run)
