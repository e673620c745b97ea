"""`mai store check --pool POOL`: the lock probe across the hosts of a work pool, which no check on one host can do
(storage/filesystem_check.py). One flow run of `mai-store-probe` per worker of the pool polling now, all at once,
each on its worker's host and mount of the store (found by the store's id, as a drain finds it). Hosts that took a
lock another held have locks that do not exclude each other: they would compute the same outputs."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled

from mai.errors import ConfigError
from mai.flows.fanout import online
from mai.host import host_name
from mai.run.prefect_sync import synchronous
from mai.storage.filesystem_check import (
    CROSS_HOST_PROBES,
    cross_host_lock_probe,
    cross_host_results,
    hosts_whose_locks_leak,
    on_one_kernel,
)
from mai.storage.paths import Home, locate_store, store_id

PROBE_DEPLOYMENT = "mai-store-probe/probe"
START_WAIT_S = 120.0  # for the workers to start the probe's flow runs (a process each) before the probe's own wait


@dataclass(frozen=True)
class PoolProbe:
    pool: str
    hosts: list[str]          # the hosts that took part
    leaks: list[str]          # "<host> took the lock <host> held", one per pair whose locks do not exclude
    missing: list[str]        # the probe's flow runs that ended without a result, with their state
    one_kernel: bool = False  # every host ran on one machine's kernel: excluding locks there prove nothing between machines


@flow(name="mai-store-probe", persist_result=False)
def mai_store_probe(home: str, store_id: str, probe_id: str, participants: int, timeout_s: float = 60.0) -> list[str]:
    """One host's part: holds a lock in the store while the others try it, and tries theirs; returns the hosts whose
    lock this host took (empty: their locks exclude this host's processes)."""
    store = locate_store(home, store_id)
    probe = cross_host_lock_probe(store.locks / CROSS_HOST_PROBES / probe_id, host_name(), participants, timeout_s)
    get_run_logger().warning("lock probe %s on host %s: %s", probe_id, probe.host,
                             f"took the locks that {', '.join(probe.took)} held" if probe.took
                             else "could not take any lock another host held")
    return probe.took


def probe_pool(home: Home, pool: str, deployment: str = PROBE_DEPLOYMENT, timeout_s: float = 60.0) -> PoolProbe:
    if not PREFECT_API_URL.value():
        raise ConfigError("--pool needs the Prefect server the pool's workers poll: set PREFECT_API_URL")
    probe_id, identity = uuid.uuid4().hex, store_id(home)
    with get_client(sync_client=True) as client:
        try:
            found = client.read_deployment_by_name(deployment)
        except ObjectNotFound as error:
            raise ConfigError(f"the Prefect server has no deployment '{deployment}': run `prefect deploy --all` from "
                              "the mai checkout") from error
        if found.work_pool_name != pool:
            raise ConfigError(f"deployment '{deployment}' runs on pool '{found.work_pool_name}', not '{pool}': deploy "
                              f"it on '{pool}' (its work_pool in prefect.yaml) or name that pool")
        polling = [worker.name for worker in client.read_workers_for_work_pool(pool) if online(worker)]
        if len(polling) < 2:
            raise ConfigError(f"pool '{pool}' has {len(polling)} worker(s) polling: a probe across hosts needs two or "
                              "more; start a worker on each host that mounts the store")
        runs = [synchronous(run_deployment(deployment, timeout=0, flow_run_name=f"lock-probe-{n + 1}", parameters={
            "home": str(home.root), "store_id": identity, "probe_id": probe_id, "participants": len(polling),
            "timeout_s": timeout_s})) for n in range(len(polling))]
        deadline = time.monotonic() + START_WAIT_S + 2 * timeout_s
        states: dict[str, State | None] = {}
        while time.monotonic() < deadline:
            states = {run.name: client.read_flow_run(run.id).state for run in runs}
            if all(state is not None and state.is_final() for state in states.values()):
                break
            time.sleep(1.0)
        for run in runs:  # one that no worker took in time is cancelled: none should take it later
            if not ((state := states.get(run.name)) and state.is_final()):
                client.set_flow_run_state(run.id, Cancelled(message="the lock probe gave up waiting"), force=True)
    results = cross_host_results(home.locks / CROSS_HOST_PROBES / probe_id)
    missing = [f"{name} ended {state.name if state else 'unstarted'}: {state.message if state else ''}"
               for name, state in states.items() if state is None or not state.is_completed()]
    return PoolProbe(pool, sorted({probe.host for probe in results}), hosts_whose_locks_leak(results), missing,
                     on_one_kernel(results))
