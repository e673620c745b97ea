"""`mai estimate`: a stored run priced under latency profiles with equation 27 (mai/latency_estimate.py). It reads the
store and runs no model, so it needs no Prefect: no flow, no server (like `mai rescore`, mai/run/rescore.py)."""

from __future__ import annotations

from typing import TypedDict

from mai.errors import ConfigError
from mai.latency_estimate import estimate
from mai.storage.catalog import build_catalog
from mai.storage.latency import read_profile, read_run_calls, write_estimate
from mai.storage.paths import Home
from mai.storage.runs import is_complete


class StageTime(TypedDict):
    """One stage of a run priced under a latency profile (equation 27)."""

    stage: str
    profile: str
    calls: int
    ttft_s: float
    decode_s: float
    total_s: float


def estimate_run(run_id: str, profiles: dict[str, str], name: str, home: str | None = None) -> list[StageTime]:
    """Writes the estimate `name` of run `run_id`; `profiles` maps a model (as stored with the generations, e.g.
    'mai-tiny-large') to a profile name."""
    root = Home.at(home)
    if not is_complete(root, run_id):
        raise ConfigError(f"no completed run '{run_id}' in {root.root}")
    by_model = {model: read_profile(root, profile) for model, profile in profiles.items()}
    stages = estimate(read_run_calls(root, run_id), by_model)
    write_estimate(root, run_id, name, stages)
    build_catalog(root)
    return [StageTime(stage=s.stage, profile=s.profile, calls=s.calls, ttft_s=s.ttft_s, decode_s=s.decode_s,
                      total_s=s.total_s) for s in stages]
