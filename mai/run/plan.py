"""The store's side of planning a run: the store's locations for `mai.plan.build_plan`, and the check that the
store's locks work (a fanned-out run's check of its workers is flows/fanout.py `check_workers`). `prepare_run` is called once per run,
before any model loads; the plan it returns is what every flow, shard flow and task of the run reads."""

from __future__ import annotations

from mai.config import RunConfig
from mai.plan import RunPlan, StoreLocations, build_plan
from mai.storage.filesystem_check import require_working_store
from mai.storage.paths import Home, store_id


def store_locations(home: Home) -> StoreLocations:
    return StoreLocations(root=home.root, models=home.models, datasets=home.datasets, store_id=store_id(home),
                          fingerprints=home.fingerprints)


def prepare_run(config: RunConfig, home: Home, run_id: str | None = None, check_store: bool = True) -> RunPlan:
    """Validate and resolve `config` on `home`; raises ConfigError (what to fix) before any model loads.
    `check_store=False`: for a caller that first looks the run up in the store (which takes no lock, writes no
    output and needs no worker) and calls `check_can_compute` itself before it computes (`mai.api`)."""
    if check_store:  # a store whose locks, renames or links fail: refused first
        require_working_store(home.locks)
    config = _with_recorded_spec(config, home)
    plan = build_plan(config, store_locations(home), run_id)
    if config.benchmark_spec is not None:  # the store keeps what its spec benchmarks mean (for reports, rescore)
        from mai.storage.benchmark_specs import record_spec

        record_spec(home, config.benchmark_spec)
    return plan


def check_can_compute(plan: RunPlan) -> None:
    """What a run that computes needs beyond its plan: a store whose locks work (else it would compute twice); a
    fanned-out run also needs its workers (flows/fanout.py `check_workers`)."""
    require_working_store(Home.at(plan.home).locks)


def _with_recorded_spec(config: RunConfig, home: Home) -> RunConfig:
    """`--benchmark NAME` of a spec benchmark this store has run (the policy lab's suggested commands name it so):
    the spec the store recorded for it, as if its file had been given."""
    from mai.evals.registry import BENCHMARKS

    if config.benchmark_spec is not None or config.benchmark in BENCHMARKS:
        return config
    from mai.storage.benchmark_specs import recorded_spec

    spec = recorded_spec(home, config.benchmark)
    return config if spec is None else RunConfig(**{**config.model_dump(), "benchmark_spec": spec})
