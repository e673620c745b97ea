"""A fleet that tolerates its own hosts (#39): a worker host that cannot serve a run is taken out of it, not the
run. On simulated hosts as in tests/test_two_hosts.py (own host name, network, /tmp and PID space, the store mounted
at a path of their own, a Prefect server on PostgreSQL): host `a` is set up right; host `b`'s mount of the store
has locks that do not exclude (a `sitecustomize.py` on its workers' PYTHONPATH makes `fcntl.flock` grant every
lock, as such a filesystem does: tests/test_store_check.py); host `c`'s MAI_HOME names a path where the store is
not mounted. A 4-shard run over the three hosts completes on `a` with the in-process run's results, names `b` and
`c` with their fixes, and runs no shard twice. Its drains go to a drain deployment of another name than the
default, as a parent deployment chooses its drains' pool (MAI_DRAIN_DEPLOYMENT). Hosts `d` and `e`, workers of a
pool of their own, mount the store with bindfs (FUSE), whose locks stay on each mount: `mai store check --pool`
fails them by name. Needs root, iproute2 and PostgreSQL (`make test`): never skipped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from mai.storage.paths import Home
from mai.storage.runs import read_routes, read_shard_outcomes

from tests.helpers import comparable
from tests.hosts import Bridge, Host, start_host
from tests.postgres_prefect import PrefectServer, start_postgres, start_prefect_server
from tests.test_fanout import prefect_cli, prefect_env, stored_rows
from tests.test_two_hosts import POOL, flow_runs_at

pytestmark = [pytest.mark.prefect, pytest.mark.workers, pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
RUN_ARGS = ["--limit", "16", "--shards", "4", "--batch-size", "4", "--json"]
DRAIN_DEPLOYMENT = "mai-drain/drain-fleet"
BINDFS_POOL = "mai-bindfs"
NO_LOCKS = "import fcntl\nfcntl.flock = lambda fd, operation: None\n"


def deploy(api_url: str, directory: Path) -> None:
    """prefect.yaml's drain deployment, as `drain-fleet`, on the process pool `mai-gpu`, and its lock probe on the
    process pool `mai-bindfs`, of the fleet's server."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    [drain] = [d for d in spec["deployments"] if d["name"] == "drain"]
    [probe] = [d for d in spec["deployments"] if d["name"] == "probe"]
    spec["deployments"] = [{**drain, "name": DRAIN_DEPLOYMENT.split("/")[1]},
                           {**probe, "work_pool": {"name": BINDFS_POOL, "work_queue_name": "default"}}]
    spec.pop("definitions", None)
    prefect_file = directory / "prefect-fleet.yaml"
    prefect_file.write_text(yaml.safe_dump(spec))
    for pool in (POOL, BINDFS_POOL):
        created = prefect_cli(api_url, "work-pool", "create", pool, "--type", "process")
        assert created.returncode == 0, created.stdout + created.stderr
    deployed = prefect_cli(api_url, "deploy", "--all", "--prefect-file", str(prefect_file))
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr


def fleet_worker(bridge: Bridge, label: str, store: Path, server: PrefectServer, directory: Path,
                 env: dict[str, str], also_kept: tuple[Path, ...] = (), pool: str = POOL) -> Host:
    command = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--limit", "1", "--name",
               f"worker-on-{label}"]
    worker_env = {key: value for key, value in prefect_env(server.api_url).items() if key.startswith(("PREFECT_", "HF_"))}
    return start_host(bridge, label, store, command, {**worker_env, "PREFECT_HOME": "/tmp/prefect", **env},
                      directory / f"host-{label}.log", also_kept, bindfs=pool == BINDFS_POOL)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> Iterator[tuple[PrefectServer, Path]]:
    """The server and the store of three hosts of `mai-gpu`: `a` healthy, `b` with locks that do not exclude, `c`
    with MAI_HOME where the store is not; and two of `mai-bindfs`, `d` and `e`, whose bindfs mounts keep their
    locks to themselves."""
    directory = tmp_path_factory.mktemp("fleet")
    store = directory / "store"
    shutil.copytree(assets_home / "models", store / "models")
    shutil.copytree(assets_home / "datasets", store / "datasets")
    site = directory / "no-locks"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_LOCKS)
    postgres = start_postgres()
    bridge: Bridge | None = None
    server: PrefectServer | None = None
    hosts: list[Host] = []
    try:
        bridge = Bridge.create()
        server = start_prefect_server(postgres.url, bridge.address, directory)
        deploy(server.api_url, directory)
        hosts = [fleet_worker(bridge, "a", store, server, directory, {}),
                 fleet_worker(bridge, "b", store, server, directory, {"PYTHONPATH": str(site)}, (site,)),
                 fleet_worker(bridge, "c", store, server, directory, {"MAI_HOME": "/mnt/not-the-store"}),
                 *(fleet_worker(bridge, label, store, server, directory, {}, pool=BINDFS_POOL) for label in "de")]
        wait_for_workers(server.api_url, {POOL: 3, BINDFS_POOL: 2}, hosts)
        yield server, store
    finally:
        for host in hosts:
            host.kill()
        if server is not None:
            server.stop()
        if bridge is not None:
            bridge.close()
        postgres.stop()


def wait_for_workers(api_url: str, wanted: dict[str, int], hosts: list[Host], timeout_s: float = 300) -> None:
    """Until each pool has its workers polling (a worker registers with its first poll, seconds after its start:
    a run or probe before that would find no worker)."""
    from mai.flows.fanout import heard_lately
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    deadline = time.monotonic() + timeout_s
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        while True:
            polling = {pool: sum(heard_lately(w) for w in client.read_workers_for_work_pool(pool)) for pool in wanted}
            if all(polling[pool] >= count for pool, count in wanted.items()):
                return
            assert all(host.alive() for host in hosts), [host.log.read_text()[-2000:] for host in hosts]
            assert time.monotonic() < deadline, polling
            time.sleep(1)


def mai_run(api_url: str, home: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mai.flows.cli", "--home", str(home), "run", *RUN_ARGS, *extra],
                          cwd=REPO, env=prefect_env(api_url, MAI_DRAIN_DEPLOYMENT=DRAIN_DEPLOYMENT),
                          capture_output=True, text=True, timeout=600, check=False)


def test_two_hosts_whose_locks_do_not_exclude_each_other_fail_the_check_across_the_pool_by_name(
        fleet: tuple[PrefectServer, Path]) -> None:
    server, store = fleet
    checked = subprocess.run([sys.executable, "-m", "mai.flows.cli", "store", "check", "--home", str(store), "--pool",
                              BINDFS_POOL], cwd=REPO, env=prefect_env(server.api_url), capture_output=True, text=True,
                             timeout=400, check=False)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    # this host's own checks pass (a plain directory); the probe across the pool's two hosts fails, naming both
    assert "PASS  locks across processes" in checked.stdout, checked.stdout
    [line] = [line for line in checked.stdout.splitlines() if line.startswith("FAIL  locks between hosts: ")]
    assert "mai-d took the lock mai-e held" in line and "mai-e took the lock mai-d held" in line, line
    assert checked.stderr.startswith("store check failed: locks between hosts: mount the store"), checked.stderr


def test_a_run_takes_out_the_hosts_that_cannot_serve_it_and_completes_on_the_healthy_one(
        fleet: tuple[PrefectServer, Path], home: Path) -> None:
    server, store = fleet
    local = mai_run(server.api_url, home)
    assert local.returncode == 0, local.stderr[-3000:]
    fanned = mai_run(server.api_url, store, "--workers", "3", "--name", "bad-hosts")
    assert fanned.returncode == 0, fanned.stderr[-4000:]
    manifest, expected = json.loads(fanned.stdout), json.loads(local.stdout)
    run_id = manifest["run_id"]

    # the in-process run's routes, finals, scores and metrics
    assert comparable(read_routes(Home.at(store), run_id)) == comparable(read_routes(Home.at(home), expected["run_id"]))
    assert manifest["metrics"] == expected["metrics"] and manifest["routes"] == expected["routes"]
    # the manifest names the two hosts taken out, each with what is wrong there and the fix
    taken_out = manifest["hosts_taken_out"]
    assert set(taken_out) == {"mai-b", "mai-c"}, taken_out
    assert "locks" in taken_out["mai-b"] and "To fix:" in taken_out["mai-b"], taken_out
    assert "MAI_HOME=/mnt/not-the-store" in taken_out["mai-c"] and "set MAI_HOME" in taken_out["mai-c"], taken_out
    # and the terminal said so, one line per host, among the fan-out's progress: drains submitted, shards done
    for host in ("mai-b", "mai-c"):
        said = [line for line in fanned.stderr.splitlines() if f"host {host} taken out of this run" in line]
        assert said, fanned.stderr[-3000:]
    assert f"fan-out of run {run_id}: 3 drains submitted to work pool {POOL} (deployment {DRAIN_DEPLOYMENT})" \
        in fanned.stderr, fanned.stderr[-3000:]
    done_lines = [line for line in fanned.stderr.splitlines() if f"fan-out of run {run_id}: shard-" in line]
    assert len(done_lines) == 4 and all(" done on mai-a " in line for line in done_lines), done_lines
    # every shard ran on the healthy host, once: one completed shard flow run per shard, no identity computed twice
    outcomes = read_shard_outcomes(Home.at(store), run_id)
    assert Counter(o.host for o in outcomes) == {"mai-a": 4}, outcomes
    shard_runs = worker_flow_runs_at(server.api_url, run_id, "shard")
    assert sorted(name for name, _ in shard_runs) == [f"shard-{i:05d}" for i in range(4)], shard_runs
    assert {state for _, state in shard_runs} == {"Completed"}, shard_runs
    ids = [r["gen_id"] for r in stored_rows(store)]
    assert len(ids) == len(set(ids)) == manifest["counts"]["generations_computed"] > 0
    assert manifest["counts"]["generations_needed"] == expected["counts"]["generations_needed"]
    # the bad hosts' drains ended TakenOut; the healthy one Completed
    drains = worker_flow_runs_at(server.api_url, run_id, "drain")
    assert Counter(state for _, state in drains)["Completed"] >= 1, drains
    assert {state for _, state in drains} == {"Completed", "TakenOut"}, drains


def worker_flow_runs_at(api_url: str, run_id: str, kind: str) -> list[tuple[str, str]]:
    """(name, state name) of the run's `drain-*` or `shard-*` flow runs on the fleet's server."""
    return [(r.name, r.state_name or "") for r in flow_runs_at(api_url, run_id, kind)]

