"""`mai-sweep`: one flow call that runs a configuration once per (transfer layer, delta) with sparse RT.

Every run reuses the stored MV1, small-reasoning and S2 outputs; one attention prefill per sample captures
all sweep layers at once (the first run's prefill serves every later layer); only token selection and the
RT answers are new per (layer, delta). Re-running the sweep computes nothing."""

from __future__ import annotations

from prefect import flow, get_run_logger

from mai.config import RunConfig, sweep_variants
from mai.errors import ConfigError
from mai.flows.deployment import with_deployment_defaults
from mai.flows.run import mai_run
from mai.manifest import RunManifest
from mai.plan import RunPlan


@flow(name="mai-sweep", persist_result=False)
def mai_sweep(config: RunConfig, layers: list[int], deltas: list[float] | None = None,
              plans: list[RunPlan] | None = None) -> list[RunManifest]:
    """`plans`: the variants already validated and resolved (`mai.api.sweep`); without them each run
    validates its own."""
    config = with_deployment_defaults(config)
    variants = sweep_variants(config, layers, deltas)
    if plans is not None and [p.config for p in plans] != variants:
        raise ConfigError("the sweep's plans are not the plans of its layers and deltas")
    get_run_logger().info("sweep over layers %s, deltas %s: %d runs", layers, deltas or [config.transfer_delta],
                          len(variants))
    return [mai_run(variant, plans[index] if plans else None) for index, variant in enumerate(variants)]
