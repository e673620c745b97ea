"""`mai-store-probe`: one participant of the cross-host lock probe (`mai store check --pool POOL`), run as a flow run
of the deployment `mai-store-probe/probe` by a worker of the pool, so on that worker's host, with its mount of the
store (found by the store's id, as a drain finds it: storage/paths.locate_store). What it found is published in the
store (storage/filesystem_check.cross_host_lock_probe), where the command reads every host's result."""

from __future__ import annotations

from prefect import flow, get_run_logger

from mai.host import host_name
from mai.storage.filesystem_check import CROSS_HOST_PROBES, cross_host_lock_probe
from mai.storage.paths import locate_store


@flow(name="mai-store-probe", persist_result=False)
def mai_store_probe(home: str, store_id: str, probe_id: str, participants: int, timeout_s: float = 60.0) -> list[str]:
    """Holds a lock in the store while the other `participants` try it, and tries theirs; returns the hosts whose
    lock this host took (empty: their locks exclude this host's processes)."""
    store = locate_store(home, store_id)
    probe = cross_host_lock_probe(store.locks / CROSS_HOST_PROBES / probe_id, host_name(), participants, timeout_s)
    get_run_logger().warning("lock probe %s on host %s: %s", probe_id, probe.host,
                         f"took the locks that {', '.join(probe.took)} held" if probe.took
                         else "could not take any lock another host held")
    return probe.took
