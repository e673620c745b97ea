"""A cluster on one machine (#32, #39; docs/cluster.md): one store, one Prefect server on PostgreSQL, and simulated
hosts, each a process tree in Linux namespaces of its own (tests/hosts.py: its own host name, network namespace on a
bridge where the server listens, /tmp, PID space, and the store mounted at a path of its own) running one process
worker; the server keeps its database in a PostgreSQL cluster made by the test (tests/postgres_prefect.py). Needs
root, iproute2, bindfs and Debian's `postgresql` (`make postgresql`): without them the tests fail, never skip.

One module, one set-up (PostgreSQL, server, deployments, hosts) for every test: `make test` hands a file to one
xdist worker, so two files would build it twice. The hosts:

- `a`, `b`: healthy workers of `mai-gpu`: the store check passes on each and across both (`mai store check --pool`);
- `c`, `d`: workers of `mai-gpu` set up wrong, started after that check (they would fail it): `c`'s mount has locks
  that do not exclude (a `sitecustomize.py` on its worker's PYTHONPATH makes `fcntl.flock` grant every lock, as
  such a filesystem does: tests/test_store_check.py), `d`'s MAI_HOME names a path where the store is not mounted;
- `e`, `f`: workers of `mai-bindfs` that mount the store with bindfs (FUSE), whose locks stay on each mount: the
  check across that pool fails them by name (they are stopped after it: nothing else needs them).

One fanned-out run over a, b, c and d (its drains go to a deployment of another name than the default,
MAI_DRAIN_DEPLOYMENT, as a parent deployment chooses its drains' pool) takes c and d out, loses host a or b to a
SIGKILL in the middle of a shard, and still equals the in-process run with nothing computed twice. Then, with no
healthy host left, a run fails saying so in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from mai.manifest import ShardOutcome
from mai.storage.claims import lease_holder, lease_is_held
from mai.storage.paths import Home
from mai.storage.runs import read_routes, read_shard_outcomes, shard_lease_path
from tests.helpers import BUDGET, comparable, seeded_store
from tests.hosts import Bridge, Host, HostFault, host_faults, on_host, start_host
from tests.leaks import outlives_the_test
from tests.postgres_prefect import (
    Postgres,
    PrefectServer,
    database_tables,
    start_postgres,
    start_prefect_server,
)
from tests.test_fanout import prefect_cli, prefect_env, stored_rows, worker_flow_runs

# no `prefect` marker: the module runs a Prefect server of its own (on PostgreSQL), and every Prefect call here names
# it; the session's test server would only add its load
pytestmark = [pytest.mark.workers, pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("no_process_left")]

REPO = Path(__file__).resolve().parents[1]
POOL = "mai-gpu"            # a server of the test's own: the real pool name, no other test's flow runs reach it
BINDFS_POOL = "mai-bindfs"
DRAIN_DEPLOYMENT = "mai-drain/drain-fleet"
FAULTS_POOL = "mai-faults"  # the bad-host test's own pool: one healthy host and one per fault (tests/hosts.py)
FAULTS_DRAIN = "mai-drain/drain-faults"
BINDFS_PROBE = "mai-store-probe/probe-bindfs"
HEALTHY = ("a", "b")
NO_LOCKS = "import fcntl\nfcntl.flock = lambda fd, operation: None\n"
# long reasoning, so that a shard runs for seconds and the kill lands inside one
RUN_ARGS = ["--limit", "32", "--shards", "4", "--batch-size", "4",
            *[f"--max-new-tokens={kind}={n}" for kind, n in {**BUDGET, "R": 160}.items()], "--json"]


# how long a run, a worker or a host may take here before a test calls it hung: not a goal, a limit that a loaded
# machine meets (at load 30 the in-process 32-sample run took more than the 600 s this once was, #51)
HUNG_S = 3600.0


@dataclass
class Cluster:
    postgres: Postgres
    server: PrefectServer
    bridge: Bridge
    store: Path
    directory: Path
    hosts: dict[str, Host] = field(default_factory=dict)   # by label; a test may add hosts (the set-up kills them)

    @property
    def api_url(self) -> str:
        return self.server.api_url


def deploy(api_url: str, directory: Path) -> None:
    """prefect.yaml's drain deployment as `drain-fleet` and its lock probe, on `mai-gpu`, and the probe again as
    `probe-bindfs` on `mai-bindfs`, in one `prefect deploy --all`."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    [drain] = [d for d in spec["deployments"] if d["name"] == "drain"]
    [probe] = [d for d in spec["deployments"] if d["name"] == "probe"]
    assert drain["work_pool"]["name"] == probe["work_pool"]["name"] == POOL
    spec["deployments"] = [{**drain, "name": DRAIN_DEPLOYMENT.split("/")[1]}, probe,
                           {**probe, "name": BINDFS_PROBE.split("/")[1],
                            "work_pool": {"name": BINDFS_POOL, "work_queue_name": "default"}},
                           {**drain, "name": FAULTS_DRAIN.split("/")[1],
                            "work_pool": {"name": FAULTS_POOL, "work_queue_name": "default"}}]
    spec.pop("definitions", None)
    prefect_file = directory / "prefect-cluster.yaml"
    prefect_file.write_text(yaml.safe_dump(spec))
    create_process_pools(api_url, [POOL, BINDFS_POOL, FAULTS_POOL])
    deployed = prefect_cli(api_url, "deploy", "--all", "--prefect-file", str(prefect_file))
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr


def create_process_pools(api_url: str, pools: list[str]) -> None:
    """As `prefect work-pool create NAME --type process` does, through the API from this process (a CLI process
    each costs seconds of start-up)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        for pool in pools:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process", base_job_template=template))


def worker_host(cluster: Cluster, label: str, pool: str = POOL, env: dict[str, str] | None = None,
                also_kept: tuple[Path, ...] = (), fault: HostFault | None = None) -> Host:
    """A host whose one process is a worker of `pool` (limit 1: one GPU), its Prefect home on its own /tmp; the
    hosts of `mai-bindfs` mount the store with bindfs; `fault`: how the host is set up wrong."""
    fault = fault or HostFault()
    no_dac = "-dac_override,-dac_read_search,-fowner"
    user = ["setpriv", f"--inh-caps={no_dac}", f"--bounding-set={no_dac}"] if fault.without_dac else []
    command = [*user, sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--limit", "1", "--name",
               f"worker-on-{label}"]
    env, also_kept = {**(env or {}), **fault.env}, (*also_kept, *fault.kept)
    worker_env = {key: value for key, value in prefect_env(cluster.api_url).items()
                  if key.startswith(("PREFECT_", "HF_"))}
    host = start_host(cluster.bridge, label, cluster.store, command,
                      {**worker_env, "PREFECT_HOME": "/tmp/prefect", **(env or {})},
                      cluster.directory / f"host-{label}.log", also_kept, bindfs=pool == BINDFS_POOL,
                      after_mount=fault.after_mount)
    cluster.hosts[label] = host
    outlives_the_test(host.process.pid)  # the module's hosts: the set-up kills them
    return host


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> Iterator[Cluster]:
    """PostgreSQL, the server on the bridge, the deployments, and hosts a, b (`mai-gpu`), e, f (`mai-bindfs`)."""
    directory = tmp_path_factory.mktemp("cluster")
    store = directory / "store"
    seeded_store(store, assets_home)
    postgres = start_postgres()
    bridge: Bridge | None = None
    built: Cluster | None = None
    try:
        bridge = Bridge.create()
        server = start_prefect_server(postgres.url, bridge.address, directory)
        built = Cluster(postgres, server, bridge, store, directory)
        deploy(server.api_url, directory)
        for label in HEALTHY:
            worker_host(built, label)
        for label in "ef":
            worker_host(built, label, BINDFS_POOL)
        yield built
    finally:
        if built is not None:
            for host in built.hosts.values():
                host.kill()
            built.server.stop()
        if bridge is not None:
            bridge.close()
        postgres.stop()


def wait_for_workers(cluster: Cluster, wanted: dict[str, int], labels: str, timeout_s: float = 900) -> None:
    """Until each pool has its workers polling (a worker registers with its first poll, seconds after its start:
    a run or probe before that would find no worker); fails at once when one of the hosts `labels` died."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from mai.flows.fanout import online

    deadline = time.monotonic() + timeout_s
    with temporary_settings({PREFECT_API_URL: cluster.api_url}), get_client(sync_client=True) as client:
        while True:
            polling = {pool: sum(online(w) for w in client.read_workers_for_work_pool(pool)) for pool in wanted}
            if all(polling[pool] >= count for pool, count in wanted.items()):
                return
            hosts = [cluster.hosts[label] for label in labels]
            assert all(host.alive() for host in hosts), [host.log.read_text()[-2000:] for host in hosts]
            assert time.monotonic() < deadline, polling
            time.sleep(0.5)


def store_check(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mai.cli", "store", "check", "--home", str(cluster.store),
                           *args], cwd=REPO, env=prefect_env(cluster.api_url), capture_output=True, text=True,
                          timeout=HUNG_S, check=False)


def test_two_hosts_whose_locks_do_not_exclude_each_other_fail_the_check_across_the_pool_by_name(
        cluster: Cluster) -> None:
    wait_for_workers(cluster, {BINDFS_POOL: 2}, "ef")
    try:
        checked = store_check(cluster, "--pool", BINDFS_POOL, "--probe-deployment", BINDFS_PROBE)
    finally:
        for label in "ef":  # nothing else needs them: their polling would only load the server
            cluster.hosts[label].kill()
    assert checked.returncode == 1, checked.stdout + checked.stderr
    # this host's own checks pass (a plain directory); the probe across the pool's two hosts fails, naming both
    assert "PASS  locks across processes" in checked.stdout, checked.stdout
    [line] = [line for line in checked.stdout.splitlines() if line.startswith("FAIL  locks between hosts: ")]
    assert "mai-e took the lock mai-f held" in line and "mai-f took the lock mai-e held" in line, line
    assert checked.stderr.startswith("store check failed: locks between hosts: mount the store"), checked.stderr


def test_the_store_passes_its_checks_on_each_host_and_across_the_hosts_whose_locks_exclude_each_other(
        cluster: Cluster) -> None:
    # the server's own tables are in PostgreSQL (its migrations ran there)
    assert {"flow_run", "deployment", "work_pool"} <= set(database_tables(cluster.postgres))
    # each host finds at its own mount path what the store needs (locks, atomic rename, symlinks, ...), both at once
    on_each = {label: subprocess.Popen(on_host(cluster.hosts[label], [sys.executable, "-m", "mai.cli", "store",
                                                                      "check"], {}),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for label in HEALTHY}
    wait_for_workers(cluster, {POOL: 2}, "ab")
    checked = store_check(cluster, "--pool", POOL)
    for label, process in on_each.items():
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0 and f"store {cluster.hosts[label].store_path}" in out, out + err
    # and across the pool: each host held a lock while the other tried it, and none took the other's
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"PASS  locks between hosts: hosts mai-a, mai-b of pool {POOL} " in checked.stdout, checked.stdout
    assert checked.stdout.rstrip().endswith(f"store check passed on this host and across the hosts of pool {POOL}")


def mai_run(api_url: str, home: Path, *extra: str, args: list[str] = RUN_ARGS,
            drains: str = DRAIN_DEPLOYMENT) -> subprocess.Popen[bytes]:
    """`mai run` on the head node (the test's namespaces), against the cluster's server, its drains submitted to
    `drains`."""
    return subprocess.Popen([sys.executable, "-m", "mai.cli", "--home", str(home), "run", *args, *extra],
                            cwd=REPO, env=prefect_env(api_url, MAI_DRAIN_DEPLOYMENT=drains),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(process: subprocess.Popen[bytes], timeout_s: float = HUNG_S) -> tuple[dict[str, Any], str]:
    """The run's manifest and what it wrote to the terminal, once it ended."""
    out, err = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, err.decode()[-4000:]
    manifest: dict[str, Any] = json.loads(out)
    return manifest, err.decode()


def start_bad_hosts(cluster: Cluster) -> None:
    """Hosts `c` (its mount's locks do not exclude) and `d` (MAI_HOME where the store is not), workers of `mai-gpu`,
    unless a test before started them."""
    if "c" in cluster.hosts:
        return
    site = cluster.directory / "no-locks"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_LOCKS)
    worker_host(cluster, "c", env={"PYTHONPATH": str(site)}, also_kept=(site,))
    worker_host(cluster, "d", env={"MAI_HOME": "/mnt/not-the-store"})


def kill_a_host_in_its_second_shard(cluster: Cluster, parent: subprocess.Popen[bytes]) -> tuple[str, str]:
    """Waits until a healthy host has completed a shard (so both will have run shards) and holds the lease of
    another, then kills every process of that host; returns the host's label and the shard it lost."""
    home = Home.at(cluster.store)
    names = {cluster.hosts[label].hostname: label for label in HEALTHY}
    deadline = time.monotonic() + HUNG_S
    while time.monotonic() < deadline and parent.poll() is None:
        for lease in home.runs.glob("*/shards/*.lease"):
            holder = str(lease_holder(lease).get("host", "")) if lease_is_held(lease) else ""
            done_there = {Path(o.shard_path).stem for o in read_shard_outcomes(home, lease.parent.parent.name)
                          if o.host == holder}
            if holder in names and done_there and lease.stem not in done_there and _shard_run_is_running(
                    cluster, lease.parent.parent.name, lease.stem) and lease_is_held(lease) \
                    and not lease.with_suffix(".json").exists():  # still inside it after the server's answer
                # inside the shard: its lease held, no outcome, its subflow run Running (a condition: a second shard,
                # its models loaded, took 1.1 s, and a fixed 1.5 s wait let it finish before the kill)
                cluster.hosts[names[holder]].kill()
                return names[holder], lease.stem
        time.sleep(0.2)
    _, err = parent.communicate(timeout=HUNG_S) if parent.poll() is None else parent.communicate()
    pytest.fail(f"no host was caught running a second shard while the run went on: {err.decode()[-3000:]}")


def _shard_run_is_running(cluster: Cluster, run_id: str, shard_run: str) -> bool:
    return any(run.name == shard_run and run.state_name == "Running"
               for run in flow_runs_at(cluster.api_url, run_id, "shard"))


def test_a_run_over_two_healthy_hosts_and_two_bad_ones_equals_the_in_process_run_and_survives_losing_a_host(
        cluster: Cluster, home: Path) -> None:
    # the two bad hosts join the pool now (the pool's lock check above would fail on `c`), starting while the
    # in-process run computes
    start_bad_hosts(cluster)
    local, _ = finished(mai_run(cluster.api_url, home))
    wait_for_workers(cluster, {POOL: 4}, "abcd")
    parent = mai_run(cluster.api_url, cluster.store, "--workers", "4", "--name", "four-hosts")
    victim, lost = kill_a_host_in_its_second_shard(cluster, parent)
    killed_at = datetime.now(UTC)
    [survivor] = set(HEALTHY) - {victim}
    fanned, said = finished(parent)
    run_id = str(fanned["run_id"])

    # the same routes, finals and scores, the same metrics as the run in one process
    assert comparable(read_routes(Home.at(cluster.store), run_id)) == comparable(
        read_routes(Home.at(home), str(local["run_id"])))
    assert fanned["metrics"] == local["metrics"] and fanned["routes"] == local["routes"]
    # the manifest names the two hosts taken out, each with what is wrong there and the fix
    taken_out = fanned["hosts_taken_out"]
    assert set(taken_out) == {"mai-c", "mai-d"}, taken_out
    assert "locks" in taken_out["mai-c"] and "To fix:" in taken_out["mai-c"], taken_out
    assert "MAI_HOME=/mnt/not-the-store" in taken_out["mai-d"] and "set MAI_HOME" in taken_out["mai-d"], taken_out
    # and the terminal said so, one line per host, among the fan-out's progress: drains submitted, shards done
    lines = said.splitlines()
    for host in ("mai-c", "mai-d"):
        assert [line for line in lines if f"host {host} taken out of this run" in line], said[-3000:]
        # as did the bad host's worker, in its own log: the drain's one line, naming the host
        assert f"host {host} taken out of this run: " in (cluster.directory / f"host-{host[-1]}.log").read_text()
    assert f"fan-out of run {run_id}: 4 drains submitted to work pool {POOL} (deployment {DRAIN_DEPLOYMENT})" \
        in said, said[-3000:]
    done_lines = [line for line in lines if f"fan-out of run {run_id}: shard-" in line]
    assert len(done_lines) == 4 and all(re.search(r" done on mai-[ab] ", line) for line in done_lines), done_lines
    # both healthy hosts ran shards, the bad ones none; the shard that the killed host lost was completed on the other
    outcomes: list[ShardOutcome] = read_shard_outcomes(Home.at(cluster.store), run_id)
    ran_on = Counter(o.host for o in outcomes)
    assert set(ran_on) == {"mai-a", "mai-b"} and sum(ran_on.values()) == 4, ran_on
    assert [o.host for o in outcomes if Path(o.shard_path).stem == lost] == [f"mai-{survivor}"], outcomes
    assert not cluster.hosts[victim].alive() and cluster.hosts[survivor].alive()
    # one Completed shard subflow run per shard and one Crashed, the lost shard's on the killed host, by the zombie
    # automation that the run created (no heartbeat for 90 s): no shard ran twice but the lost one, and the bad hosts
    # started none
    shard_runs = until_crashed(cluster, run_id, "shard")
    assert sorted(run.name for run in shard_runs if run.state_name == "Completed") == [
        f"shard-{i:05d}" for i in range(4)], shard_runs
    [crashed] = [run for run in shard_runs if run.state_name != "Completed"]
    assert crashed.name == lost and crashed.state is not None and crashed.state.name == "Crashed", crashed
    assert "no heartbeat for 90 s" in (crashed.state.message or ""), crashed.state
    # (30-90 s after the kill, and the automation's look: two minutes is the goal; three allowed for a loaded machine)
    assert (crashed.state.timestamp - killed_at).total_seconds() < 180, (crashed.state.timestamp, killed_at)
    # the drains: the survivor's Completed, the victim's Crashed, the bad hosts' TakenOut (the victim's slot's new
    # drain too, when a bad host took it)
    drains = Counter(run.state_name for run in until_crashed(cluster, run_id, "drain"))
    assert drains["Completed"] == 1 and drains["Crashed"] == 1 and drains["TakenOut"] >= 2, drains
    assert set(drains) <= {"Completed", "Crashed", "TakenOut", "Cancelled"}, drains
    # each process that ran shards (a drain on a worker) loaded each model at most once, however many shards it ran
    loads = Counter((o.host, o.pid, model) for o in outcomes for model in o.loaded_models)
    assert loads and max(loads.values()) == 1, loads
    # nothing computed twice: every identity the run needed is in the files once, written by this run. What the
    # lost host stored before it died is kept, not computed again: the surviving shards' engines computed the rest
    rows = stored_rows(cluster.store)
    ids = [r["gen_id"] for r in rows]
    assert len(ids) == len(set(ids)), "an identity was generated twice"
    counts = fanned["counts"]
    assert counts["generations_computed"] == counts["generations_needed"] == len(ids) > 0
    assert {r["run_id"] for r in rows} == {run_id}
    assert counts["generations_needed"] == local["counts"]["generations_needed"]
    assert 0 < counts["engine_generations"] <= counts["generations_computed"]
    assert counts["engine_generations"] == sum(o.tally.generations for o in outcomes)
    assert not any(lease_is_held(shard_lease_path(Home.at(cluster.store), run_id, o.shard_path)) for o in outcomes)


# budgets of its own: every output of the bad-host run is new in the cluster's store, so each shard generates
FAULT_RUN_ARGS = ["--limit", "16", "--shards", "8", "--batch-size", "2",
                  *[f"--max-new-tokens={kind}={n + 2}" for kind, n in BUDGET.items()], "--json"]
# what each bad host's line says: the cause and the fix
FAULT_WORDS = {"mai-g": ("Read-only file system", "mount it read-write"),
               "mai-h": ("Permission denied", "(root) may not write the store"),
               "mai-i": ("No space left on device", "is full: free space"),
               "worker worker-on-j": ("libarrow.so.2600", "install mai and its packages there"),
               "mai-k": ("mai 0.0.1 here, 0.1.0 planned", "install the same mai and packages on every host"),
               "mai-l": ("failed to load on host mai-l", "libcudart.so.12"),
               "mai-m": ("ran out of memory", "smaller --batch-size")}


def test_a_run_over_one_healthy_host_and_one_of_each_bad_kind_completes_there_naming_each(
        cluster: Cluster, home: Path) -> None:
    """Eight hosts of a pool of their own, one drain each: `n` healthy, and one host per fault (tests/hosts.py
    host_faults: a read-only, unwritable or full store, a package that cannot be imported, another mai version, a
    model that cannot load, a GPU out of memory). Every bad host is taken out with one line naming it, the cause and
    the fix, on its own log, the run's terminal and the run's logs in Prefect; the healthy host runs every shard and
    the run equals the in-process run."""
    labels = "ghijklm"
    faults = host_faults(cluster.directory, {label: f"/mnt/store-on-{label}" for label in labels})
    for label in labels:
        worker_host(cluster, label, FAULTS_POOL, fault=faults[label])
    worker_host(cluster, "n", FAULTS_POOL)
    local, _ = finished(mai_run(cluster.api_url, home, args=FAULT_RUN_ARGS))
    wait_for_workers(cluster, {FAULTS_POOL: 8}, labels + "n")
    fanned, said = finished(mai_run(cluster.api_url, cluster.store, "--workers", "8", "--name", "bad-hosts",
                                    args=FAULT_RUN_ARGS, drains=FAULTS_DRAIN))
    run_id = str(fanned["run_id"])
    assert comparable(read_routes(Home.at(cluster.store), run_id)) == comparable(
        read_routes(Home.at(home), str(local["run_id"])))
    assert fanned["metrics"] == local["metrics"] and fanned["routes"] == local["routes"]
    assert {o.host for o in read_shard_outcomes(Home.at(cluster.store), run_id)} == {"mai-n"}
    taken_out = fanned["hosts_taken_out"]
    assert set(taken_out) == set(FAULT_WORDS), taken_out
    for host, words in FAULT_WORDS.items():
        assert all(word in taken_out[host] for word in words), (host, taken_out[host])
        assert "\n" not in taken_out[host] and "Traceback" not in taken_out[host], taken_out[host]
        # on the terminal, among the fan-out's lines
        assert any(f"{taken_out[host]}; the other hosts take its shards" in line for line in said.splitlines()), \
            said[-4000:]
    for label in "ghiklm":  # the drain's line in its worker's log (j's drain never ran mai's code)
        log = (cluster.directory / f"host-{label}.log").read_text()
        assert f"' - host mai-{label} taken out of this run: {taken_out[f'mai-{label}'].partition(': ')[2]}" in log, \
            log[-3000:]
    assert "Traceback" not in said, said[-4000:]
    # and in the run's logs in Prefect (the UI's Logs tab)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests.test_fanout import parent_flow_run, parent_logs

    with temporary_settings({PREFECT_API_URL: cluster.api_url}):
        parent = parent_flow_run("bad-hosts").id
        logged = parent_logs(parent, "taken out of this run")
        # its INFO decisions too, which the terminal does not show: each drain submitted to the pool
        submitted = parent_logs(parent, f"submitted to work pool {FAULTS_POOL} as flow run")
    assert {host for host in FAULT_WORDS if any(taken_out[host] in line for line in logged)} == set(FAULT_WORDS)
    assert len(submitted) >= 8 and not [line for line in said.splitlines() if "submitted to work pool" in line and
                                        " fan-out " not in line], submitted
    ids = [r["gen_id"] for r in stored_rows(cluster.store) if r["run_id"] == run_id]
    assert len(ids) == len(set(ids)) == fanned["counts"]["generations_computed"] > 0


def test_with_no_healthy_host_left_a_run_fails_saying_so_in_one_line(cluster: Cluster) -> None:
    """After the run above, only the bad hosts c and d are left once the survivor is gone too: a run's drains are
    taken out there, a new drain is tried while attempts are left, then the run fails (exit 2), in one line
    without a traceback that names the hosts taken out and says that no healthy worker is left."""
    start_bad_hosts(cluster)
    alive = "".join(label for label in "abcd" if cluster.hosts[label].alive())
    wait_for_workers(cluster, {POOL: len(alive)}, alive)  # at once after the test above
    for label in HEALTHY:
        cluster.hosts[label].kill()
    failed = subprocess.run([sys.executable, "-m", "mai.cli", "--home", str(cluster.store), "run", "--limit", "4",
                             "--shards", "1", "--batch-size", "4", "--workers", "1", "--name", "no-healthy-host"],
                            cwd=REPO, env=prefect_env(cluster.api_url, MAI_DRAIN_DEPLOYMENT=DRAIN_DEPLOYMENT),
                            capture_output=True, text=True, timeout=HUNG_S, check=False)
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert failed.returncode == 2 and len(errors) == 1, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert re.match(r"error: run \S+: no healthy worker is left: the hosts taken out \(host mai-[cd] taken out of "
                    r"this run: .*\) need the fix named; what the shards stored is kept", errors[0]), errors[0]


def until_crashed(cluster: Cluster, run_id: str, kind: str, timeout_s: float = 300.0) -> list[Any]:
    """The run's `kind` flow runs once one of them is Crashed (the zombie automation marks a lost host's drain and
    shard runs 90 s after their last heartbeat, which may be after the run completed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = flow_runs_at(cluster.api_url, run_id, kind)
        if any(run.state_name == "Crashed" for run in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(1.0)


def flow_runs_at(api_url: str, run_id: str, kind: str) -> list[Any]:
    """The run's `drain-*` or `shard-*` flow runs on the cluster's server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        return worker_flow_runs(run_id, kind)


# On a host: serve /health on its own 127.0.0.1 as `vllm serve` would, register it as `mai serve` does, say where,
# then (after a line on stdin) look it up the way a shard on this host does.
SERVE_AND_REGISTER = """
import os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from mai.backends import vllm_server
from mai.types import ModelSpec

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass

model = ModelSpec("mai-tiny-small", revision="sha256:abc", local=True)
home = Path(os.environ["MAI_HOME"])
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}"
vllm_server.register(home, model, vllm_server.ServerInfo(model=model.identity_name, url=url, owner="mai-serve"))
print(url, flush=True)
sys.stdin.readline()
found = vllm_server.lookup(home, model)
print(found.url if found else "none", flush=True)
"""

# On the other host: what a shard there finds for the same model, and whether the first host's URL answers here
LOOK_UP = """
import os, sys
from pathlib import Path
from mai.backends import vllm_server
from mai.types import ModelSpec

model = ModelSpec("mai-tiny-small", revision="sha256:abc", local=True)
found = vllm_server.lookup(Path(os.environ["MAI_HOME"]), model)
print(found.url if found else "none", vllm_server.health(sys.argv[1]))
"""


def registry_hosts(store: Path) -> dict[str, str]:
    """host -> the URL of its one registered server, read from the shared store's registry file."""
    from mai.backends import vllm_server

    return {host: info.url for host, info in vllm_server.registered(store)}


def test_a_hosts_vllm_servers_are_neither_used_nor_removed_by_the_other(cluster: Cluster, tmp_path: Path) -> None:
    """Host x serves the model on its 127.0.0.1 and registers it in the shared store; on host y, which shares the
    store but not the loopback, a shard's lookup finds nothing and leaves x's entry; y then serves on the same port
    of its own loopback (the same URL): y uses its own server, and once it is gone drops its own entry only; x's
    lookup still finds its server."""
    store = tmp_path / "store"
    store.mkdir()
    idle = ["sleep", "infinity"]
    hosts = {label: start_host(cluster.bridge, label, store, idle, {}, tmp_path / f"{label}.log") for label in "xy"}
    try:
        wait_for_namespaces(hosts.values())
        serving = subprocess.Popen(on_host(hosts["x"], [sys.executable, "-c", SERVE_AND_REGISTER], {}),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert serving.stdout is not None and serving.stdin is not None
        url_on_x = serving.stdout.readline().strip()
        assert url_on_x.startswith("http://127.0.0.1:"), serving.communicate(timeout=30)
        assert registry_hosts(store) == {"mai-x": url_on_x}

        looked_up = subprocess.run(on_host(hosts["y"], [sys.executable, "-c", LOOK_UP, url_on_x], {}),
                                   capture_output=True, text=True, timeout=600, check=True)
        assert looked_up.stdout.split() == ["none", "False"]  # not x's server, which y cannot reach
        assert registry_hosts(store) == {"mai-x": url_on_x}   # and x's entry is still there

        port_on_x = url_on_x.rsplit(":", 1)[1]
        on_y = subprocess.Popen(on_host(hosts["y"], [sys.executable, "-c", SERVE_AND_REGISTER, port_on_x], {}),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert on_y.stdout is not None
        assert on_y.stdout.readline().strip() == url_on_x  # the same URL, another host's server
        assert registry_hosts(store) == {"mai-x": url_on_x, "mai-y": url_on_x}
        # while it lives, y's own server is the one y uses; then it ends (the process exits after its lookup)
        assert on_y.communicate("\n", timeout=60)[0].strip() == url_on_x
        again = subprocess.run(on_host(hosts["y"], [sys.executable, "-c", LOOK_UP, url_on_x], {}),
                               capture_output=True, text=True, timeout=600, check=True)
        assert again.stdout.split() == ["none", "False"]
        assert registry_hosts(store) == {"mai-x": url_on_x}   # y dropped its dead entry, and only its own

        out, err = serving.communicate("\n", timeout=60)
        assert out.strip() == url_on_x, err[-2000:]            # x still finds and uses its own server
    finally:
        for host in hosts.values():
            host.kill()


def wait_for_namespaces(hosts: object) -> None:
    """A host's namespaces exist once its first process runs the command (the mounts are made before it)."""
    deadline = time.monotonic() + 300
    for host in hosts:  # type: ignore[attr-defined]
        while "infinity" not in " ".join(child_commands(host.process.pid)):
            assert host.alive() and time.monotonic() < deadline, host.log.read_text()
            time.sleep(0.1)


def child_commands(pid: int) -> list[str]:
    """The command lines of the processes under `pid` (two levels: unshare's child, its children)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            stat = (cmdline.parent / "stat").read_text().rpartition(")")[2].split()
            if int(stat[1]) == pid or Path(f"/proc/{stat[1]}/stat").read_text().rpartition(")")[2].split()[1] == str(pid):
                found.append(cmdline.read_text().replace("\0", " "))
        except (OSError, IndexError):
            continue
    return found
