"""`mai-drain`: one process on a worker that runs a fanned-out run's shards until none is left, so that the process
loads each model once per run (the engine registry keeps them), not once per shard as a flow run per shard would
(a process worker starts a fresh Python process for every flow run).

Each shard runs as a `mai-shard` subflow run named after it (the UI's per-shard progress, under the drain's run). A
drain takes a shard only with its lease (a flock on the shard's lease file in the shared store, taken without
waiting), so two drains never run one shard; a shard whose outcome is in the store is done. After a pass over the
shards, the drain waits for those that other drains hold: one whose lease frees without an outcome (its drain's
process died) it takes itself. Its flow-run heartbeats tell Prefect that its process lives (flows/fanout.py).

A drain whose host cannot do the run's work (mai.host_faults: the store missing, read-only, unwritable or full
here, its mount's locks failing the probe, other code than the plan's, a package that cannot be imported, a
checkpoint that differs or a model that does not load, a GPU out of memory) is taken out: it lets go of the shard it
held (another drain takes it), says why in one line naming the host and the fix, and ends in the `TakenOut` state
(flows/fanout.py `taken_out`), which the parent reads as "this host is unfit", not as a failed run. Any other
failure is the run's (it would fail on every host): the drain fails, and the run with it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from uuid import uuid4

from prefect import flow, get_run_logger, tags
from prefect.client.schemas.objects import State

from mai import stop
from mai.code_version import code_difference
from mai.errors import ConfigError
from mai.flows.fanout import POLL_S, SKEWED_FIX, shard_run_name, taken_out
from mai.flows.shard import mai_shard
from mai.host import host_name
from mai.host_faults import host_fault
from mai.plan import RunPlan
from mai.storage.claims import Lease
from mai.storage.paths import Home, plan_on_this_host
from mai.storage.runs import shard_lease_path, shard_outcome_path


@flow(name="mai-drain", persist_result=False)
def mai_drain(plan: RunPlan, shard_paths: list[str]) -> list[str] | State:
    """Runs every shard of `shard_paths` that no other drain runs, until each has its outcome in the store; returns
    the shards this drain ran, or the `TakenOut` state when this host cannot do the run's work (mai.host_faults).
    SIGTERM (a Prefect cancellation) stops it within a decoding step."""
    try:
        # once per drain: this host's code against the plan's, the store where this host mounts it ($MAI_HOME),
        # and the run's checkpoints found and checked on this host, a first write in the run's directory (a
        # read-only, unwritable or full store fails there, as what it is), the lock probe at its first shard lease
        # (claims.Lease): each fails before any shard runs
        _require_the_planned_code(plan)
        plan = plan_on_this_host(plan)
        home = Home.at(plan.home)
        _require_writable(home.runs / plan.run_id / "shards")
        with stop.on_sigterm(), tags(*plan.tags):
            _stop_when_the_worker_goes()
            return _drain(plan, shard_paths, home)
    except Exception as error:
        fault = host_fault(error)
        if fault is None:  # not this host's: it would fail on every host, and fails the run (flows/fanout.py)
            get_run_logger().error("drain on host %s failed, not for a fault of this host (%s: %s): the run fails",
                                   host_name(), type(error).__name__, error)
            raise
        # the shard lease was let go on the way out (`_run_if_free`): another drain takes that shard
        state = taken_out(host_name(), fault)
        get_run_logger().error("%s", state.message)
        return state


def _require_writable(directory: Path) -> None:
    """Raises the OSError of a store that this host cannot write (read-only, not its user's, full), before the lock
    probe would report it as a failed lock check."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".tmp-writable-{uuid4().hex}"
    probe.write_bytes(b"")
    probe.unlink()


def _require_the_planned_code(plan: RunPlan) -> None:
    """A host whose mai, source or packages differ from the planning host's computes outputs that the run's
    identities do not describe: it takes no shard."""
    difference = code_difference(plan.code_versions)
    if difference:
        raise ConfigError(f"it runs other code than the run was planned with ({difference}): {SKEWED_FIX}")


WORKER_WATCH_S = 0.5


def _stop_when_the_worker_goes() -> None:
    """A process worker starts each drain in a session of its own, under a supervisor that outlives it: a worker
    that dies (SIGKILL, a stop that kills it) does not take its drain along, which would run on, holding its shard and
    its GPU (Prefect's worker does not stop its flow runs when it stops; systemd's KillMode=control-group would). So
    the drain watches its worker process: once that is gone, it stops as a cancellation would, within a decoding
    step, and its shard's lease is free for another drain."""
    worker = _worker_process()

    def watch() -> None:
        while _lives(worker) and not stop.stop_requested():
            time.sleep(WORKER_WATCH_S)
        stop.request_stop(f"its worker (pid {worker[0]}) stopped")

    threading.Thread(target=watch, name="mai-drain-watches-its-worker", daemon=True).start()


def _worker_process() -> tuple[int, str]:
    """The drain's worker: the nearest ancestor that runs `prefect worker` (Prefect 3.9 starts a drain through a
    supervisor process of its own, which outlives a killed worker), else the drain's parent; with its start time, so
    that a new process under a reused pid is not taken for it."""
    pid = os.getppid()
    for _ in range(4):
        if pid <= 1:
            break
        command = _proc(pid, "cmdline").split("\0")
        if "prefect" in " ".join(command) and "worker" in command:
            return pid, _stat(pid)[19]
        pid = int(_stat(pid)[1] or 0)
    return os.getppid(), _stat(os.getppid())[19]


def _lives(process: tuple[int, str]) -> bool:
    return _stat(process[0])[19] == process[1] != ""


def _proc(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name, "" for each where the process is gone: [1] its parent,
    [19] its start time (fields 4 and 22 of the file)."""
    fields = _proc(pid, "stat").rpartition(")")[2].split()
    return fields if len(fields) > 19 else [""] * 20


def _drain(plan: RunPlan, shard_paths: list[str], home: Home) -> list[str]:
    log = get_run_logger()
    ran: list[str] = []
    waiting_for: int | None = None
    while True:
        left = [shard for shard in shard_paths if not shard_outcome_path(home, plan.run_id, shard).exists()]
        if not left:
            log.info("every shard of run %s is done; this drain ran %d: %s", plan.run_id, len(ran), ran)
            return ran
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


def _run_if_free(plan: RunPlan, shard: str, home: Home) -> bool:
    """Runs `shard` as a subflow when no one holds its lease and its outcome is not in the store; True if it ran."""
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
