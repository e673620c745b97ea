"""Running a plan's shards: in the parent's process (embedded Prefect; `workers` 0), or fanned out as `mai-shard`
flow runs of the deployment `mai-shard/shard` to the `mai-gpu` work pool, `workers` at a time.

A shard on a worker holds a lease (a flock on a file in the shared store) while it runs. The parent watches each
shard's flow run; one that Prefect still calls Running while its lease is free has lost its worker (SIGKILL, a
lost machine): the parent marks it Crashed and submits the shard again, and the new flow run computes only the
identities the store lacks. A shard that fails with an error is retried by Prefect itself (the flow's retries).
"""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from uuid import UUID

from mai.flows.prefect_sync import synchronous
from mai.storage.claims import lease_is_held
from mai.storage.paths import Home
from mai.storage.runs import read_shard_outcome, shard_lease_path
from mai.tasks.logs import run_logger
from prefect.exceptions import TerminationSignal

from mai import stop
from mai.errors import ConfigError
from mai.manifest import ShardOutcome
from mai.plan import RunPlan

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import Worker

SHARD_DEPLOYMENT = "mai-shard/shard"
LEASE_GRACE_S = 10.0     # a Running shard whose lease stays free this long has lost its worker
POLL_S = 1.0
MAX_ATTEMPTS = 3         # submissions of one shard whose worker died


# a shard that no worker has taken for this long makes the parent ask whether any worker of the pool polls at all
NO_WORKER_WAIT_S = float(os.environ.get("MAI_NO_WORKER_WAIT_S", "60"))


class ShardFailed(RuntimeError):
    """A shard's flow run failed after its retries, or lost its worker MAX_ATTEMPTS times."""


class NoWorker(ConfigError):
    """No worker of the shard deployment's pool is polling: a set-up to fix, said in one line."""


def shard_run_name(shard_path: str) -> str:
    return PurePosixPath(shard_path).stem


def check_fanout() -> None:
    """Fan-out needs a Prefect server that the workers also reach, and the shard deployment on it."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise ConfigError("--workers needs a Prefect server that the workers reach: start one (`prefect server "
                          "start`) and set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)")
    try:
        with get_client(sync_client=True) as client:
            client.read_deployment_by_name(SHARD_DEPLOYMENT)
    except ObjectNotFound as error:
        raise ConfigError(f"the Prefect server at {url} has no deployment '{SHARD_DEPLOYMENT}': run `prefect deploy "
                          "--all` from the mai checkout, then start one worker per GPU: `CUDA_VISIBLE_DEVICES=0 "
                          "prefect worker start --pool mai-gpu --limit 1`") from error
    except Exception as error:  # connection refused, timeouts: the same for the user
        raise ConfigError(f"the Prefect server at {url} does not answer ({type(error).__name__}): start it or "
                          "fix PREFECT_API_URL") from error


def run_shards(plan: RunPlan, shard_paths: list[str], workers: int,
               on_done: Callable[[int], None]) -> dict[str, ShardOutcome]:
    """shard path -> its outcome (stage maps, accounting); `on_done(n)` after each finished shard."""
    if workers == 0:
        return _run_in_process(plan, shard_paths, on_done)
    return _run_on_workers(plan, shard_paths, workers, on_done)


def _run_in_process(plan: RunPlan, shard_paths: list[str], on_done: Callable[[int], None]
                    ) -> dict[str, ShardOutcome]:
    from mai.flows.shard import mai_shard
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    outcomes = {}
    # No heartbeats from a shard subflow in the parent's process: the parent's own show that the process lives, and
    # a flow run's end waits for its heartbeat thread to wake from a 1 s sleep (prefect 3.9 `_send_heartbeats`),
    # which cost every in-process shard 0-1 s of nothing (docs/benchmarks.md, "Cascade speed").
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        for index, shard in enumerate(shard_paths):
            named = mai_shard.with_options(flow_run_name=shard_run_name(shard))
            outcomes[shard] = named(plan, shard)
            on_done(index + 1)
    return outcomes


def _run_on_workers(plan: RunPlan, shard_paths: list[str], workers: int, on_done: Callable[[int], None]
                    ) -> dict[str, ShardOutcome]:
    outcomes: dict[str, ShardOutcome] = {}
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mai-shard")
    # each thread carries the flow's context, so the shard flow runs appear under this run in the UI
    futures = {pool.submit(contextvars.copy_context().run, _remote_shard, plan, shard): shard for shard in shard_paths}
    try:
        for future in as_completed(futures):
            outcomes[futures[future]] = future.result()
            on_done(len(outcomes))
    except (KeyboardInterrupt, stop.StopRequested, TerminationSignal):
        # Ctrl-C or SIGTERM (a Prefect cancellation of this flow run too): no shard is submitted any more, and the
        # watchers cancel theirs (they see the stop request within a poll); what the shards stored is kept
        stop.request_stop("interrupted (Ctrl-C)")  # a SIGTERM's own reason, when it came first, is kept
        run_logger().warning("run %s stopped: cancelling its shard flow runs; %d of %d shards had finished",
                             plan.run_id, len(outcomes), len(shard_paths))
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return {shard: outcomes[shard] for shard in shard_paths}


def _remote_shard(plan: RunPlan, shard_path: str) -> ShardOutcome:
    from prefect.deployments import run_deployment

    log = run_logger()
    home = Home.at(plan.home)
    parameters = {"plan": plan.model_dump(mode="json"), "shard_path": shard_path}
    for attempt in range(1, MAX_ATTEMPTS + 1):
        stop.check()  # after a stop request, no shard flow run is created any more
        name = shard_run_name(shard_path) + (f" (attempt {attempt})" if attempt > 1 else "")
        flow_run = synchronous(run_deployment(SHARD_DEPLOYMENT, parameters=parameters, flow_run_name=name,
                                              timeout=0, tags=plan.tags))
        log.info("shard %s submitted to the shard deployment's work pool as flow run '%s' (%s)", shard_path, name,
                 flow_run.id)
        state = _watch(flow_run.id, home, plan.run_id, shard_path)
        if state == "COMPLETED":
            outcome = read_shard_outcome(home, plan.run_id, shard_path)
            if outcome is None:
                raise ShardFailed(f"shard {shard_path} completed without writing its outcome to the store")
            log.info("shard %s completed on %s (pid %d) in %.1f s", shard_path, outcome.host, outcome.pid,
                     outcome.wall_s)
            return outcome
        if state != "CRASHED":
            log.error("shard %s: flow run '%s' ended %s", shard_path, name, state)
            raise ShardFailed(f"shard {shard_path}: flow run '{name}' ended {state} (see it in the Prefect UI)")
        log.warning("shard %s: flow run '%s' lost its worker (lease free for %.0f s): marked Crashed; %s",
                    shard_path, name, LEASE_GRACE_S,
                    "submitting it again" if attempt < MAX_ATTEMPTS else "giving up")
    raise ShardFailed(f"shard {shard_path} lost its worker {MAX_ATTEMPTS} times")


def _watch(flow_run_id: UUID, home: Home, run_id: str, shard_path: str) -> str:
    """Waits for the shard's flow run to end; returns its final state type (CRASHED for a lost worker). After a stop
    request it cancels the flow run and raises StopRequested."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    lease = shard_lease_path(home, run_id, shard_path)
    free_since: float | None = None
    queued_since = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            state = flow_run.state
            if state is not None and state.is_final():
                return state.type.value
            if stop.stop_requested():
                _cancel(client, flow_run_id, state is not None and state.is_running())
                raise stop.StopRequested(stop.reason())
            queued = state is not None and (state.is_scheduled() or state.is_pending())
            if queued and time.monotonic() - queued_since > NO_WORKER_WAIT_S:
                _require_a_worker(client, flow_run_id, flow_run.work_pool_name, shard_path)
                queued_since = time.monotonic()  # workers poll but are busy: ask again after another wait
            running = state is not None and state.is_running()
            if not running or lease_is_held(lease):
                free_since = None
            elif free_since is None:
                free_since = time.monotonic()
            elif time.monotonic() - free_since > LEASE_GRACE_S:
                client.set_flow_run_state(flow_run_id, Crashed(message="its worker died: the shard's lease in the "
                                                                       "store was released"), force=True)
                return "CRASHED"
            time.sleep(POLL_S)


def _require_a_worker(client: SyncPrefectClient, flow_run_id: UUID, pool: str | None, shard_path: str) -> None:
    """Raises NoWorker (after cancelling the shard, so no worker takes it later) when no worker of `pool` has sent a
    heartbeat lately; logs that the shard waits for a busy pool otherwise."""
    workers = client.read_workers_for_work_pool(pool) if pool else []
    if any(_heard_lately(worker) for worker in workers):
        run_logger().info("shard %s waits for a free worker of pool %s", shard_path, pool)
        return
    _cancel(client, flow_run_id, running=False)
    raise NoWorker(f"no worker of work pool '{pool}' is polling: shard {shard_path} waited {NO_WORKER_WAIT_S:.0f} s "
                   f"(MAI_NO_WORKER_WAIT_S). Start one per GPU, e.g. `CUDA_VISIBLE_DEVICES=0 prefect worker start "
                   f"--pool {pool} --limit 1`, and run again (what the run stored is kept)")


def _heard_lately(worker: Worker) -> bool:
    """A worker is polling when its last heartbeat is younger than three of its intervals (the rule by which the
    server marks workers offline, applied here: a server may run that service late, or not at all)."""
    if worker.last_heartbeat_time is None:
        return False
    interval = worker.heartbeat_interval_seconds or 30
    return datetime.now(UTC) - worker.last_heartbeat_time < timedelta(seconds=3 * interval)


def _cancel(client: SyncPrefectClient, flow_run_id: UUID, running: bool) -> None:
    """A running shard is set Cancelling (its worker then stops the process: SIGTERM, which the shard turns into a
    stop within a decoding step); one that no worker took yet is Cancelled at once, so no worker takes it later."""
    from prefect.states import Cancelled, Cancelling

    message = "the run that submitted this shard was stopped"
    client.set_flow_run_state(flow_run_id, Cancelling(message=message) if running else Cancelled(message=message),
                              force=True)
