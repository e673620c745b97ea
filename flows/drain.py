"""`mai-drain`: one process on a worker that runs a fanned-out run's shards until none is left, so that it loads each
model once per run (the engine registry keeps them); a flow run per shard would start a fresh process, and load them,
for every shard.

Each shard runs as a `mai-shard` subflow run named after it, taken only with its lease (a flock in the shared store,
taken without waiting), so two drains never run one shard; a shard whose outcome is in the store is done, and one
whose lease frees without an outcome (its drain's process died) is taken by the next drain to look.

A drain whose host cannot do the run's work (mai.host_faults) lets go of its shard and ends `TakenOut`, saying why
(flows/fanout.py); any other failure would fail on every host: the drain fails, and the run with it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from uuid import uuid4

import psutil
from prefect import flow, get_run_logger, tags
from prefect.client.schemas.objects import State

from mai import stop
from mai.code_version import code_difference
from mai.errors import ConfigError
from mai.flows.fanout import POLL_S, SKEWED_FIX, shard_run_name, taken_out
from mai.flows.shard import mai_shard
from mai.host import host_name
from mai.host_faults import host_fault
from mai.plan import RunPlan, backend_difference
from mai.storage.claims import Lease
from mai.storage.paths import Home, plan_on_this_host
from mai.storage.runs import shard_lease_path, shard_outcome_path

WORKER_WATCH_S = 0.5


@flow(name="mai-drain", persist_result=False)
def mai_drain(plan: RunPlan, shard_paths: list[str]) -> list[str] | State:
    """The shards this drain ran, or the `TakenOut` state. SIGTERM (a Prefect cancellation) stops it within a
    decoding step."""
    try:
        # this host's fitness, each before any shard runs: its code against the plan's, the store where this host
        # mounts it, the run's checkpoints here, a first write (a read-only or full store fails as what it is, not
        # as the lock probe at the first lease)
        difference = code_difference(plan.code_versions)
        if difference:  # outputs the run's identities do not describe
            raise ConfigError(f"it runs other code than the run was planned with ({difference}): {SKEWED_FIX}")
        plan = plan_on_this_host(plan)
        if difference := backend_difference(plan):  # its vLLM environment or server flags, its image processor
            raise ConfigError(f"it would compute with other backends than the run was planned with ({difference}): "
                              "give every host the same vLLM environment and MAI_VLLM_SERVE_ARGS, and the same "
                              "packages, then restart its workers")
        home = Home.at(plan.home)
        _require_writable(home.runs / plan.run_id / "shards")
        with stop.on_sigterm(), tags(*plan.tags):
            _stop_when_the_worker_goes()
            return _drain(plan, shard_paths, home)
    except Exception as error:
        fault = host_fault(error)
        if fault is None:
            get_run_logger().error("drain on host %s failed, not for a fault of this host (%s: %s): the run fails",
                                   host_name(), type(error).__name__, error)
            raise
        state = taken_out(host_name(), fault)  # its shard's lease was let go on the way out (`_run_if_free`)
        get_run_logger().error("%s", state.message)
        return state


def _require_writable(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".tmp-writable-{uuid4().hex}"
    probe.write_bytes(b"")
    probe.unlink()


def _stop_when_the_worker_goes() -> None:
    """Prefect's process worker leaves its flow runs running when it dies (a SIGKILL, a stop that kills it), under
    a supervisor that outlives it; systemd's KillMode=control-group would end them. So the drain watches its worker
    and, once it is gone, stops as a cancellation would, freeing its shard and its GPU."""
    worker = _worker_process()

    def watch() -> None:
        while worker.is_running() and not stop.stop_requested():  # is_running: False for a reused pid too
            time.sleep(WORKER_WATCH_S)
        stop.request_stop(f"its worker (pid {worker.pid}) stopped")

    threading.Thread(target=watch, name="mai-drain-watches-its-worker", daemon=True).start()


def _worker_process() -> psutil.Process:
    """The nearest ancestor that runs `prefect worker` (Prefect 3.9's supervisor process sits in between), else
    the drain's parent."""
    this = psutil.Process()
    for process in this.parents()[:4]:
        try:
            command = process.cmdline()
        except psutil.Error:
            continue
        if "prefect" in " ".join(command) and "worker" in command:
            return process
    return this.parent() or this


def _drain(plan: RunPlan, shard_paths: list[str], home: Home) -> list[str]:
    log = get_run_logger()
    ran: list[str] = []
    waiting_for: int | None = None
    while left := [shard for shard in shard_paths if not shard_outcome_path(home, plan.run_id, shard).exists()]:
        took = False
        for shard in left:
            stop.check()  # after a stop request no shard is taken any more
            if _run_if_free(plan, shard, home):
                ran.append(shard)
                took = True
        if not took:
            stop.check()
            if waiting_for != len(left):
                log.info("%d shards left, each run by another drain: waiting for them (one whose drain dies is "
                         "taken here)", len(left))
                waiting_for = len(left)
            time.sleep(POLL_S)
    log.info("every shard of run %s is done; this drain ran %d: %s", plan.run_id, len(ran), ran)
    return ran


def _run_if_free(plan: RunPlan, shard: str, home: Home) -> bool:
    """Runs `shard` when no one holds its lease and its outcome is not in the store; True if it ran."""
    lease = Lease.try_take(shard_lease_path(home, plan.run_id, shard))
    if lease is None:
        return False
    with lease:  # let go on leaving, whatever happened
        if shard_outcome_path(home, plan.run_id, shard).exists():
            return False  # finished by another drain between the look and the lease
        if lease.previous_holder:
            get_run_logger().warning("shard %s: its last holder %s left it unfinished: running it here", shard,
                                     lease.previous_holder)
        mai_shard.with_options(flow_run_name=shard_run_name(shard))(plan, shard)
    return True
