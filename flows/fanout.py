"""Running a plan's shards: in the parent's process (embedded Prefect; `workers` 0), or on a work pool as `workers`
drains (flows/drain.py): flow runs of the drain deployment, `mai-drain/drain` on `mai-gpu` unless the parent's
environment names another (`MAI_DRAIN_DEPLOYMENT`: each parent deployment chooses its drains' pool).

The parent only watches: the shards' outcomes in the store and the drains' flow runs (one request a poll). A lost
worker is Prefect's to find: drains and their shard runs send heartbeats every HEARTBEAT_S, the "detect zombie flows"
automation that the parent creates marks one that fell silent Crashed, and the parent submits a new drain in its
slot; the shard it held is free at once (its lease is a flock). A shard that fails after the shard flow's retries
fails its drain and the run.

A host that cannot serve the run (mai.host_faults; or code too old to read the plan, or a flow it cannot import) is
taken out, not the run: its drain ends `TakenOut` having run nothing, the other drains take every shard, and the
manifest lists the host with the reason and the fix. Its slot gets a new drain only when no other drain is left (it
may land on a healthy worker); the run fails, saying so in one line, only when no healthy worker is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas import filters
from prefect.client.schemas.objects import FlowRun, State, StateType, Worker, WorkerStatus
from prefect.exceptions import ObjectNotFound, TerminationSignal
from prefect.runtime import flow_run as this_flow_run
from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import Cancelled, Cancelling, Failed

from mai import stop
from mai.config import RunConfig
from mai.errors import ConfigError, RunFailed
from mai.manifest import ShardOutcome
from mai.pipeline import ShardsDone
from mai.plan import RunPlan
from mai.run.prefect_sync import synchronous
from mai.storage.paths import Home
from mai.storage.runs import read_shard_outcome

DRAIN_DEPLOYMENT = "mai-drain/drain"  # the default; MAI_DRAIN_DEPLOYMENT names another (`drain_deployment`)
POLL_S = 1.0
READ_LIMIT = 200  # flow runs one request reads at most (Prefect's default API limit)
MAX_ATTEMPTS = 3         # drains submitted in one slot (the first and its replacements after lost workers)
DRAIN_END_WAIT_S = 30.0  # once every shard is done, how long the parent waits for its running drains to end
# drains' and their shard runs' heartbeats: Prefect's shortest interval; the zombie automation marks a run Crashed
# after three intervals without one (Prefect's documented rule)
HEARTBEAT_S = 30
ZOMBIE_AUTOMATION = "mai: crash drain and shard runs without heartbeats"
DRAIN_START_AUTOMATION = "mai: crash drain runs that never sent a heartbeat"
DRAIN_FLOWS = ["mai-drain", "mai-shard"]
# a drain that no worker took this long after the run's flow run started makes the parent ask whether a worker of
# the pool is online; while one is (busy) it asks again every NO_WORKER_RECHECK_S
NO_WORKER_WAIT_S = float(os.environ.get("MAI_NO_WORKER_WAIT_S", "60"))
NO_WORKER_RECHECK_S = 10.0

TAKEN_OUT = "TakenOut"  # the name of the Failed state a drain ends in when its host cannot serve the run
SKEWED_FIX = ("install the same mai and packages on every host (the same wheel or checkout), then restart its "
              "workers")
# how Prefect's engine ends a drain before mai's code ran: its process could not load the flow (an import failure),
# or its mai could not read the plan (an older mai, before the code-version check)
_FLOW_NOT_LOADED = "Unexpected exception encountered when trying to load flow"
_PLAN_NOT_READ = "Validation of flow parameters failed"


def taken_out(host: str, reason: str) -> State:
    """Failed, as the drain did, under a name the parent tells from a failed shard."""
    return Failed(name=TAKEN_OUT, message=f"host {host} taken out of this run: {reason}")


def _taken_out(client: SyncPrefectClient, flow_run: FlowRun) -> tuple[str, str] | None:
    """(host, message) for a drain whose host cannot serve the run: it ended TakenOut, or Prefect's engine ended it
    before mai's code ran (Failed: its mai could not read the plan, the state's message has the error; Crashed: its
    process could not import the flow, the error is in the logs the engine sent). A host whose own code did not run
    is named by its worker (the docs name workers after their host and GPU)."""
    state = flow_run.state
    message = (state.message or "") if state else ""
    if state is not None and state.name == TAKEN_OUT:
        return message.partition(" taken out of this run: ")[0].removeprefix("host "), message
    worker = str((flow_run.labels or {}).get("prefect.worker.name", "unknown"))
    taken = f"host of worker {worker} taken out of this run"
    if message.startswith(_PLAN_NOT_READ):
        error = " ".join(line.strip() for line in message.splitlines() if line.strip())
        return f"worker {worker}", (f"{taken}: it runs other code than the run was planned with (its mai cannot read "
                                    f"the run's plan: {error[:300]}): {SKEWED_FIX}")
    if state is None or not state.is_crashed():
        return None
    logs = client.read_logs(log_filter=filters.LogFilter(flow_run_id=filters.LogFilterFlowRunId(any_=[flow_run.id])))
    lines = [line for log in logs if log.message.startswith(_FLOW_NOT_LOADED) for line in log.message.splitlines()
             if line.strip()]
    return (f"worker {worker}", (f"{taken}: its drain could not load mai's flow there ({lines[-1]}): install mai "
                                 "and its packages there as on the host that planned the run")) if lines else None


def drain_deployment() -> str:
    return os.environ.get("MAI_DRAIN_DEPLOYMENT") or DRAIN_DEPLOYMENT


def _progress(message: str, *args: object) -> None:
    """A fan-out step an operator watches for, at WARNING: the level `mai` shows on the terminal and sends to the UI
    by default (cli/ sets it), where INFO reaches neither."""
    get_run_logger().warning("fan-out " + message, *args)


def shard_run_name(shard_path: str) -> str:
    return PurePosixPath(shard_path).stem


def online(worker: Worker) -> bool:
    """Prefect's word: ONLINE until the server's foreman finds no heartbeat for three of its intervals."""
    return worker.status == WorkerStatus.ONLINE


def check_workers(config: RunConfig) -> None:
    """A fanned-out run's needs, checked before any model loads: a Prefect server that the workers also reach, the
    drain deployment on it, and the zombie automation there."""
    if not config.workers:
        return
    url, deployment = PREFECT_API_URL.value(), drain_deployment()
    if not url:
        raise ConfigError("--workers needs a Prefect server that the workers reach: start one (`prefect server "
                          "start`) and set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)")
    try:
        with get_client(sync_client=True) as client:
            client.read_deployment_by_name(deployment)
            ensure_zombie_automation(client)
    except ObjectNotFound as error:
        raise ConfigError(f"the Prefect server at {url} has no deployment '{deployment}' (MAI_DRAIN_DEPLOYMENT, "
                          f"default {DRAIN_DEPLOYMENT}): run `prefect deploy --all` from the mai checkout, then start "
                          "one worker per GPU: `CUDA_VISIBLE_DEVICES=0 prefect worker start --pool mai-gpu --limit 1`"
                          ) from error
    except Exception as error:  # connection refused, timeouts: the same for the user
        raise ConfigError(f"the Prefect server at {url} does not answer ({type(error).__name__}): start it or "
                          "fix PREFECT_API_URL") from error


def ensure_zombie_automation(client: SyncPrefectClient) -> bool:
    """Prefect's "detect zombie flows" automation, scoped to drain and shard runs, and a second one for drains alone,
    unless the server has them (by name). The first marks Crashed a run of those flows whose heartbeats stopped for
    three intervals before it ended; the second a drain that went Running and then sent no heartbeat, nor ended, in
    that time (its process died before its first heartbeat reached the server). Shards are watched only from their
    first heartbeat: a run's shards in its own process (no --workers) send none. Only these flows: others on a shared
    server keep Prefect's 180 s heartbeat, which this window would call dead. True if one was created."""
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    ended = {f"prefect.flow-run.{name}" for name in ("Completed", "Failed", "Cancelled", "Crashed", TAKEN_OUT)}
    created = False
    watches = [(ZOMBIE_AUTOMATION, "heartbeat", DRAIN_FLOWS,
                "its fanned-out runs' drains and shards, lost with their host, end Crashed"),
               (DRAIN_START_AUTOMATION, "Running", ["mai-drain"],
                "a fanned-out run's drain whose process died before its first heartbeat ends Crashed")]
    for name, start, flows, what in watches:
        if client.read_automations_by_name(name):
            continue
        client.create_automation(AutomationCore(name=name, description=f"created by mai: {what}", trigger=EventTrigger(
            after={f"prefect.flow-run.{start}"}, expect={"prefect.flow-run.heartbeat", *ended},
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification({"prefect.resource.role": "flow", "prefect.resource.name": flows}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=3 * HEARTBEAT_S)),
            actions=[ChangeFlowRunState(name=None, force=False, state=StateType.CRASHED, message=(
                f"no heartbeat for {3 * HEARTBEAT_S} s: its host or process is gone (mai's zombie automation)"))]))
        created = True
    return created


def run_shards(plan: RunPlan, shard_paths: list[str], workers: int, on_done: Callable[[int], None]) -> ShardsDone:
    """Each shard's outcome and the hosts taken out; `on_done(n)` after each finished shard."""
    if workers:
        return _run_on_workers(plan, shard_paths, workers, on_done)
    from mai.flows.shard import mai_shard

    outcomes = {}
    # no heartbeats from shard subflows in the parent's process (its own show that it lives): a flow run's end waits
    # for its heartbeat thread's 1 s sleep (prefect 3.9), 0-1 s per shard (docs/benchmarks.md, "Cascade speed")
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        for index, shard in enumerate(shard_paths):
            outcomes[shard] = mai_shard.with_options(flow_run_name=shard_run_name(shard))(plan, shard)
            on_done(index + 1)
    return ShardsDone(outcomes, {})


@dataclass
class _Drain:
    """One slot's current drain flow run, as the parent watches it."""

    slot: int
    attempt: int
    flow_run_id: UUID
    name: str
    pool: str | None
    asked_at: float | None = None  # last asked whether a worker is online, while no worker had taken it
    lost: str | None = None        # why it counts as lost (its worker died), once it does
    taken_out: str | None = None   # its host, once the drain ended TakenOut there


def _run_on_workers(plan: RunPlan, shard_paths: list[str], workers: int, on_done: Callable[[int], None]
                    ) -> ShardsDone:
    home = Home.at(plan.home)
    outcomes: dict[str, ShardOutcome] = {}
    hosts_taken_out: dict[str, str] = {}
    with get_client(sync_client=True) as client:
        # the no-worker wait counts from the run's flow run's start (before materialising), not from the drains'
        started = time.monotonic()
        flow_run_id = this_flow_run.get_id()
        if flow_run_id and (start := client.read_flow_run(UUID(flow_run_id)).start_time):
            started -= min(max((datetime.now(UTC) - start).total_seconds(), 0.0), NO_WORKER_WAIT_S)
        drains: list[_Drain] = []
        try:
            for slot in range(1, min(workers, len(shard_paths)) + 1):
                drains.append(_submit_drain(plan, shard_paths, slot, attempt=1))
            _progress("of run %s: %d drains submitted to work pool %s (deployment %s); waiting for its workers to "
                      "take them", plan.run_id, len(drains), drains[0].pool, drain_deployment())
            while True:
                stop.check()  # after a stop request, no drain is submitted any more
                # the drains before the outcomes: a drain that ended for lack of work is then never replaced
                ended = _watch_drains(client, plan.run_id, drains, hosts_taken_out, started)
                _collect(home, plan.run_id, shard_paths, outcomes, on_done)
                if len(outcomes) == len(shard_paths):
                    break
                drains = _replace(plan, shard_paths, drains, ended, hosts_taken_out)
                time.sleep(POLL_S)
        except (KeyboardInterrupt, stop.StopRequested, TerminationSignal) as error:
            # Ctrl-C or SIGTERM (a Prefect cancellation of this flow run too): Prefect's runner stops each drain's
            # process (SIGTERM: its shard stops within a decoding step) and reports it Cancelled; a SIGTERM's own
            # reason, when it came first, is kept
            stop.request_stop("stopped by signal SIGTERM" if isinstance(error, TerminationSignal) else
                              "interrupted (Ctrl-C)")
            # INFO: the terminal's one line is the command line's; the UI shows the Cancelled states' messages
            get_run_logger().info("run %s stopped: cancelling its drains; %d of %d shards had finished",
                                  plan.run_id, len(outcomes), len(shard_paths))
            _cancel_drains(client, drains, "the run that submitted this drain was stopped")
            raise
        except (RunFailed, ConfigError):  # a failed shard, no (healthy) worker
            _cancel_drains(client, drains, "the run that submitted this drain failed")
            raise
        _end_drains(client, drains)
    if hosts_taken_out:
        get_run_logger().warning("run %s completed without the hosts taken out: %s", plan.run_id,
                                 "; ".join(hosts_taken_out.values()))
    return ShardsDone({shard: outcomes[shard] for shard in shard_paths}, hosts_taken_out)


def _submit_drain(plan: RunPlan, shard_paths: list[str], slot: int, attempt: int) -> _Drain:
    """A drain as a child of this run's flow run, with heartbeats every HEARTBEAT_S (its job variables' env, added
    to the deployment's), so that the zombie automation finds it when it is lost."""
    from prefect.deployments import run_deployment

    name = f"drain-{slot}" + (f" (attempt {attempt})" if attempt > 1 else "")
    parameters = {"plan": plan.model_dump(mode="json"), "shard_paths": shard_paths}
    heartbeats = {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}}
    flow_run = synchronous(run_deployment(drain_deployment(), parameters=parameters, flow_run_name=name, timeout=0,
                                          tags=plan.tags, job_variables=heartbeats))
    get_run_logger().info("drain %d submitted to work pool %s as flow run '%s' (%s): it takes the run's shards until "
                          "none is left", slot, flow_run.work_pool_name, name, flow_run.id)
    return _Drain(slot=slot, attempt=attempt, flow_run_id=flow_run.id, name=name, pool=flow_run.work_pool_name)


def _collect(home: Home, run_id: str, shard_paths: list[str], outcomes: dict[str, ShardOutcome],
             on_done: Callable[[int], None]) -> None:
    """Adds the outcomes that appeared in the store since the last look (a shard's outcome is written last)."""
    for shard in shard_paths:
        if shard not in outcomes and (outcome := read_shard_outcome(home, run_id, shard)) is not None:
            outcomes[shard] = outcome
            _progress("of run %s: %s done on %s (pid %d) in %.1f s; %d of %d", run_id, shard_run_name(shard),
                      outcome.host, outcome.pid, outcome.wall_s, len(outcomes), len(shard_paths))
            on_done(len(outcomes))


def _watch_drains(client: SyncPrefectClient, run_id: str, drains: list[_Drain], hosts_taken_out: dict[str, str],
                  started: float) -> list[_Drain]:
    """The drains that ended: Completed, Crashed (lost: its worker or host died) or taken out (their host added to
    `hosts_taken_out`). Raises RunFailed for one that failed otherwise or that someone else cancelled."""
    ended = []
    flow_runs = _flow_runs(client, drains)
    if gone := [drain.name for drain in drains if drain.flow_run_id not in flow_runs]:
        raise RunFailed(f"the flow runs of drains {gone} of run {run_id} are no longer on the Prefect server "
                        "(deleted?); what the shards stored is kept")
    for drain in drains:
        flow_run = flow_runs[drain.flow_run_id]
        state = flow_run.state
        if state is None or not state.is_final():
            if state is not None and (state.is_scheduled() or state.is_pending()):
                _ask_for_a_worker(client, drain, flow_run.work_pool_name, started)
            continue
        if (out := _taken_out(client, flow_run)) is not None:
            drain.taken_out, message = out
            if drain.taken_out not in hosts_taken_out:
                get_run_logger().warning("%s; the other hosts take its shards", message)
            hosts_taken_out[drain.taken_out] = message
        elif state.is_crashed():
            drain.lost = f"its flow run ended Crashed: {state.message or ''}"
            get_run_logger().warning("drain '%s' lost its worker (%s); the shard it ran is taken by the next drain to "
                                     "look", drain.name, drain.lost)
        elif not state.is_completed():
            worker, message = (flow_run.labels or {}).get("prefect.worker.name", "unknown"), state.message or ""
            get_run_logger().error("drain '%s' on worker %s ended %s: %s", drain.name, worker, state.type.value, message)
            raise RunFailed(f"drain '{drain.name}' of run {run_id} on worker {worker} ended {state.type.value}, not "
                              f"for a fault of that host (it would fail on every host): {message} (its logs in the "
                              "Prefect UI have the traceback; what the shards stored is kept)")
        ended.append(drain)
    return ended


def _ask_for_a_worker(client: SyncPrefectClient, drain: _Drain, pool: str | None, started: float) -> None:
    """Once the run has waited NO_WORKER_WAIT_S (then every NO_WORKER_RECHECK_S): raises ConfigError when no worker
    of `pool` is online (the caller cancels the drains, so no worker takes them later); says, the first time, that the
    drain waits for a busy pool otherwise."""
    now = time.monotonic()
    if now - started <= NO_WORKER_WAIT_S or (drain.asked_at is not None and now - drain.asked_at <= NO_WORKER_RECHECK_S):
        return
    workers = client.read_workers_for_work_pool(pool) if pool else []
    polling = [worker for worker in workers if online(worker)]
    if not polling:
        heard = max(((w.last_heartbeat_time, w.name) for w in workers if w.last_heartbeat_time), default=None)
        raise ConfigError(f"no worker of work pool '{pool}' is polling (" + (
            f"its last worker to poll, {heard[1]}, polled {(datetime.now(UTC) - heard[0]).total_seconds():.0f} s ago"
            if heard else "no worker of it has polled yet") + f"): the run waited {now - started:.0f} s for one "
            f"(MAI_NO_WORKER_WAIT_S={NO_WORKER_WAIT_S:g}). Start one per GPU, e.g. `CUDA_VISIBLE_DEVICES=0 "
            f"mai worker --pool {pool} --limit 1`, and run again (what the run stored is kept)")
    if drain.asked_at is None:
        taken = filters.FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING])
        running = client.count_flow_runs(
            flow_run_filter=filters.FlowRunFilter(state=filters.FlowRunFilterState(type=taken)),
            work_pool_filter=filters.WorkPoolFilter(name=filters.WorkPoolFilterName(any_=[pool or ""])))
        _progress("drain %s waits for a worker of pool %s (%.0f s since the run started): %d of its workers are "
                  "online and %d of its flow runs are running or starting%s", drain.name, pool, now - started,
                  len(polling), running, ": its workers are busy" if running >= len(polling) else
                  ": a worker with a free slot takes it at its next poll, unless a work queue or concurrency "
                  "limit holds it")
    drain.asked_at = now  # workers are online but busy: ask again in a while


def _replace(plan: RunPlan, shard_paths: list[str], drains: list[_Drain], ended: list[_Drain],
             hosts_taken_out: dict[str, str]) -> list[_Drain]:
    """The drains to watch next: those that still run, a new one in the slot of each that lost its worker, and,
    when no drain is left, one in the slot of a drain that was taken out (a worker of the pool may be healthy)."""
    live = [drain for drain in drains if drain not in ended]
    out = [drain for drain in ended if drain.taken_out is not None and drain.attempt < MAX_ATTEMPTS]
    if not live and out and not any(drain.lost for drain in ended):
        get_run_logger().warning("no drain of run %s is left after hosts %s were taken out: submitting drain %d again "
                                 "for another worker", plan.run_id, sorted(hosts_taken_out), out[0].slot)
        return [_submit_drain(plan, shard_paths, out[0].slot, out[0].attempt + 1)]
    for drain in ended:
        if drain.lost is None:
            continue  # it completed (there was nothing left for it to take), or its host was taken out
        again = drain.attempt < MAX_ATTEMPTS
        get_run_logger().warning("drain '%s' was lost: %s", drain.name, f"submitting drain {drain.slot} again"
                                 if again else f"giving slot {drain.slot} up after {MAX_ATTEMPTS} lost drains")
        if again:
            live.append(_submit_drain(plan, shard_paths, drain.slot, drain.attempt + 1))
    if not live and hosts_taken_out:
        raise ConfigError(f"run {plan.run_id}: no healthy worker is left: the hosts taken out ("
                              + "; ".join(hosts_taken_out.values()) + ") need the fix named; what the shards stored "
                              "is kept")
    if not live:
        raise RunFailed(f"run {plan.run_id}: no drain is left to run its shards (a slot gives up after its drains "
                          f"lost their worker {MAX_ATTEMPTS} times)")
    return live


def _end_drains(client: SyncPrefectClient, drains: list[_Drain]) -> None:
    """Every shard is done: a drain that no worker took yet is cancelled; running ones end by themselves within a
    poll and are awaited (DRAIN_END_WAIT_S at most: one whose host died ends Crashed by the automation, later)."""
    deadline = time.monotonic() + DRAIN_END_WAIT_S
    while drains and time.monotonic() < deadline:
        flow_runs = _flow_runs(client, drains)
        states = [(drain, flow_runs[drain.flow_run_id].state) for drain in drains if drain.flow_run_id in flow_runs]
        _cancel_drains(client, [drain for drain, state in states if state and (state.is_scheduled() or
                                                                              state.is_pending())],
                       "every shard of its run was done")
        drains = [drain for drain, state in states if state and state.is_running()]
        if drains:
            time.sleep(POLL_S / 4)
    if drains:
        get_run_logger().warning("drains %s still run %.0f s after the run's last shard (one whose host died ends "
                                 "Crashed within %d s of its last heartbeat)", [d.name for d in drains],
                                 DRAIN_END_WAIT_S, 3 * HEARTBEAT_S)


def _cancel_drains(client: SyncPrefectClient, drains: list[_Drain], message: str) -> None:
    """Prefect's cancellation: Cancelling for a drain that a worker took (the runner supervising its process sends
    it SIGTERM and reports it and its shard runs Cancelled), Cancelled at once for one that no worker took yet, so
    that none takes it later."""
    flow_runs = _flow_runs(client, drains)
    for drain in drains:
        state = flow_runs[drain.flow_run_id].state if drain.flow_run_id in flow_runs else None  # None: deleted
        if state is not None and not state.is_final():
            cancelled: State = Cancelled(message=message) if state.is_scheduled() else Cancelling(message=message)
            client.set_flow_run_state(drain.flow_run_id, cancelled, force=True)


def _flow_runs(client: SyncPrefectClient, drains: list[_Drain]) -> dict[UUID, FlowRun]:
    """The drains' flow runs by id, read in one request per READ_LIMIT drains: a parent watching many drains asks
    the server once per poll, not once per drain (every request costs the server's CPU, shared by every run on it).
    One deleted on the server is missing: the watch fails the run for it, a cancellation or the end wait skips it."""
    ids = [drain.flow_run_id for drain in drains]
    return {run.id: run for start in range(0, len(ids), READ_LIMIT) for run in client.read_flow_runs(
        flow_run_filter=filters.FlowRunFilter(id=filters.FlowRunFilterId(any_=ids[start:start + READ_LIMIT])),
        limit=READ_LIMIT)}
