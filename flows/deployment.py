"""Deployment parameters that are partial configurations.

Prefect merges a flow run's parameters onto its deployment's at the top level only: a run created with
`config={"limit": 60}` would get a config of RunConfig's defaults plus that limit, not the deployment's
configuration with that change. A flow that takes a config calls `with_deployment_defaults` first: the config
the run was given is merged, field by field (and budget by budget, batch size by batch size), onto the
deployment's own."""

from __future__ import annotations

from typing import Any

from mai.config import RunConfig, config_from_mapping


def merge_config(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    merged = {**defaults, **given}
    for key in ("max_new_tokens", "vllm_urls", "batch_sizes"):
        if isinstance(defaults.get(key), dict) and isinstance(given.get(key), dict):
            merged[key] = {**defaults[key], **given[key]}
    return merged


def with_deployment_defaults(config: RunConfig, parameter: str = "config") -> RunConfig:
    """`config` unchanged outside a deployment run; inside one, the deployment's config with the run's changes."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    if flow_run.get_id() is None:
        return config
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run.get_id())  # type: ignore[arg-type]  # accepts the id as a string
        given = (run.parameters or {}).get(parameter)
        if run.deployment_id is None or not isinstance(given, dict):
            return config
        defaults = (client.read_deployment(run.deployment_id).parameters or {}).get(parameter)
    return config_from_mapping(merge_config(defaults, given)) if isinstance(defaults, dict) else config


def started_by(command: str) -> str:
    """How a run planned inside its flow was started (its provenance's command): the Prefect deployment and flow run
    where there is one, since the process's own command line is then a worker's; else `command`."""
    from prefect.runtime import deployment, flow_run

    if not deployment.name:
        return command
    return f"Prefect deployment {flow_run.flow_name}/{deployment.name}, flow run {flow_run.id} (process: {command})"
