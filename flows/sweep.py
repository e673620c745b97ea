"""`mai-sweep`: one flow call that runs a configuration once per (transfer layer, delta) with sparse RT.

Every run reuses the stored MV1, small-reasoning and S2 outputs; one attention prefill per sample captures
all sweep layers at once (the first run's prefill serves every later layer); only token selection and the
RT answers are new per (layer, delta). Re-running the sweep computes nothing."""

from __future__ import annotations

from typing import Any

from mai.flows.deployment import with_deployment_defaults
from mai.flows.run import mai_run
from prefect import flow

from mai.config import RunConfig
from mai.errors import ConfigError


@flow(name="mai-sweep", persist_result=False)
def mai_sweep(config: RunConfig, layers: list[int], deltas: list[float] | None = None) -> list[dict[str, Any]]:
    if not layers:
        raise ConfigError("a sweep needs at least one layer")
    config = with_deployment_defaults(config)
    manifests = []
    for delta in deltas or [config.transfer_delta]:
        for layer in layers:
            variant = config.model_copy(update={
                "transfer": "sparse", "transfer_layer": layer, "transfer_delta": delta,
                "capture_layers": sorted(set(layers)),
                "run_name": f"{config.run_name or 'sweep'}-L{layer}-d{delta}"})
            manifests.append(mai_run(variant))
    return manifests
