"""A deployment run's parameters are checked when the run is created, keys of closed sets included: Prefect validates
them against the flow's parameter schema (what a deployment stores, with the validator its server uses), so a
budget for an unknown prompt kind is refused before a worker takes the run."""

from __future__ import annotations

from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools.validation import ValidationError, validate

from mai.flows.run import mai_run

SCHEMA: dict[str, Any] = parameter_schema(mai_run).model_dump_for_openapi()


@pytest.mark.parametrize("config", [{"max_new_tokens": {"Q": 5}}, {"batch_sizes": {"s": 4}},
                                    {"vllm_urls": {"medium": "http://127.0.0.1:1"}}])
def test_keys_outside_their_closed_set_are_refused_at_creation(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        validate({"config": config}, SCHEMA, raise_on_error=True, ignore_required=True)


@pytest.mark.parametrize("config", [{"max_new_tokens": {"S": 5, "RT": 9}}, {"batch_sizes": {"R": 64}},
                                    {"vllm_urls": {"small": "http://127.0.0.1:1"}}, {"limit": 60}])
def test_keys_from_their_closed_set_are_accepted(config: dict[str, Any]) -> None:
    assert validate({"config": config}, SCHEMA, raise_on_error=True, ignore_required=True) == []
