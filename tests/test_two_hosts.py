"""Two machines, one store, one Prefect server on PostgreSQL, as on a cluster (#32; docs/cluster.md), simulated on
the test machine: each host is a process tree in Linux namespaces of its own (tests/hosts.py: its own host name,
network namespace on a bridge where the server listens, /tmp, PID space, and the store mounted at a path of its
own), running one process worker of pool `mai-gpu`; the Prefect server keeps its database in a PostgreSQL cluster
made by the test (tests/postgres_prefect.py). Needs root, iproute2 and Debian's `postgresql` (installed by `make
test`): without them the test fails, it is never skipped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from mai.storage.claims import lease_holder, lease_is_held
from mai.storage.paths import Home
from mai.storage.runs import read_routes, read_shard_outcomes, shard_lease_path

from mai.manifest import ShardOutcome
from tests.helpers import BUDGET, comparable
from tests.hosts import Bridge, Host, on_host, start_host
from tests.postgres_prefect import (
    Postgres,
    PrefectServer,
    database_tables,
    start_postgres,
    start_prefect_server,
)
from tests.test_fanout import prefect_cli, prefect_env, stored_rows, worker_flow_runs

pytestmark = [pytest.mark.prefect, pytest.mark.workers, pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
POOL = "mai-gpu"            # a server of the test's own: the real pool name, no other test's flow runs reach it
HOSTS = ("a", "b")
FANOUT_DEPLOYMENTS = {"shard", "drain"}
# long reasoning, so that a shard runs for seconds and the kill lands inside one
RUN_ARGS = ["--limit", "32", "--shards", "4", "--batch-size", "4",
            *[f"--max-new-tokens={kind}={n}" for kind, n in {**BUDGET, "R": 160}.items()], "--json"]
# Each host mounts the store at a path of its own, its MAI_HOME, where its drains find it by the store's id (the
# planned path lies under the test's /tmp, which each host hides behind a private tmpfs)


@dataclass
class Cluster:
    postgres: Postgres
    server: PrefectServer
    bridge: Bridge
    store: Path
    hosts: dict[str, Host]
    directory: Path

    @property
    def api_url(self) -> str:
        return self.server.api_url


def deploy_shard_deployment(api_url: str, directory: Path) -> None:
    """prefect.yaml's deployments that a fanned-out run creates flow runs of (its shards, or the worker slots that
    take them), on pool `mai-gpu` of the cluster's server, as `prefect deploy --all` puts them."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    spec["deployments"] = [d for d in spec["deployments"] if d["name"] in FANOUT_DEPLOYMENTS]
    assert spec["deployments"] and {d["work_pool"]["name"] for d in spec["deployments"]} == {POOL}
    spec.pop("definitions", None)
    prefect_file = directory / "prefect-cluster.yaml"
    prefect_file.write_text(yaml.safe_dump(spec))
    created = prefect_cli(api_url, "work-pool", "create", POOL, "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = prefect_cli(api_url, "deploy", "--all", "--prefect-file", str(prefect_file))
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr


def worker_host(bridge: Bridge, label: str, store: Path, api_url: str, directory: Path) -> Host:
    """A host whose one process is a worker of `mai-gpu` (limit 1: one GPU), its Prefect home on its own /tmp."""
    command = [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--limit", "1", "--name",
               f"worker-on-{label}"]
    env = {key: value for key, value in prefect_env(api_url).items() if key.startswith(("PREFECT_", "HF_"))}
    env["PREFECT_HOME"] = "/tmp/prefect"
    return start_host(bridge, label, store, command, env, directory / f"host-{label}.log")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> Iterator[Cluster]:
    import shutil

    directory = tmp_path_factory.mktemp("cluster")
    store = directory / "store"
    shutil.copytree(assets_home / "models", store / "models")
    shutil.copytree(assets_home / "datasets", store / "datasets")
    postgres = start_postgres()
    bridge: Bridge | None = None
    server: PrefectServer | None = None
    hosts: dict[str, Host] = {}
    try:
        bridge = Bridge.create()
        server = start_prefect_server(postgres.url, bridge.address, directory)
        deploy_shard_deployment(server.api_url, directory)
        hosts = {label: worker_host(bridge, label, store, server.api_url, directory) for label in HOSTS}
        yield Cluster(postgres, server, bridge, store, hosts, directory)
    finally:
        for host in hosts.values():
            host.kill()
        if server is not None:
            server.stop()
        if bridge is not None:
            bridge.close()
        postgres.stop()


def mai_run(api_url: str, home: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`mai run` on the head node (the test's namespaces), against the cluster's server."""
    return subprocess.Popen([sys.executable, "-m", "mai.flows.cli", "--home", str(home), "run", *RUN_ARGS, *extra],
                            cwd=REPO, env=prefect_env(api_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(process: subprocess.Popen[bytes], timeout_s: float = 600) -> dict[str, object]:
    out, err = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, err.decode()[-4000:]
    manifest: dict[str, object] = json.loads(out)
    return manifest


def kill_a_host_in_its_second_shard(cluster: Cluster, parent: subprocess.Popen[bytes]) -> tuple[str, str]:
    """Waits until a host has completed a shard (so both hosts will have run shards) and holds the lease of another,
    then kills every process of that host; returns the host's label and the shard it lost."""
    home = Home.at(cluster.store)
    names = {host.hostname: label for label, host in cluster.hosts.items()}
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and parent.poll() is None:
        for lease in home.runs.glob("*/shards/*.lease"):
            holder = str(lease_holder(lease).get("host", "")) if lease_is_held(lease) else ""
            done_there = {Path(o.shard_path).stem for o in read_shard_outcomes(home, lease.parent.parent.name)
                          if o.host == holder}
            if holder in names and done_there and lease.stem not in done_there:
                time.sleep(1.5)  # inside the shard: it generates
                cluster.hosts[names[holder]].kill()
                return names[holder], lease.stem
        time.sleep(0.2)
    _, err = parent.communicate(timeout=600) if parent.poll() is None else parent.communicate()
    pytest.fail(f"no host was caught running a second shard while the run went on: {err.decode()[-3000:]}")


def test_a_run_over_two_hosts_equals_the_in_process_run_and_survives_losing_a_host(
        cluster: Cluster, home: Path) -> None:
    # the server's own tables are in PostgreSQL (its migrations ran there)
    assert {"flow_run", "deployment", "work_pool"} <= set(database_tables(cluster.postgres))
    # each host finds at its own mount path what the store needs (locks, atomic rename, symlinks, ...)
    for host in cluster.hosts.values():
        checked = subprocess.run(on_host(host, [sys.executable, "-m", "mai.flows.cli", "store", "check"], {}),
                                 capture_output=True, text=True, timeout=120, check=False)
        assert checked.returncode == 0 and f"store {host.store_path}" in checked.stdout, checked.stdout + checked.stderr
    local = finished(mai_run(cluster.api_url, home))
    parent = mai_run(cluster.api_url, cluster.store, "--workers", "2", "--name", "two-hosts")
    victim, lost = kill_a_host_in_its_second_shard(cluster, parent)
    killed_at = datetime.now(UTC)
    [survivor] = set(HOSTS) - {victim}
    fanned = finished(parent)
    run_id = str(fanned["run_id"])

    # the same routes, finals and scores, the same metrics as the run in one process
    assert comparable(read_routes(Home.at(cluster.store), run_id)) == comparable(
        read_routes(Home.at(home), str(local["run_id"])))
    assert fanned["metrics"] == local["metrics"] and fanned["routes"] == local["routes"]
    # both hosts ran shards; the shard that the killed host lost was completed on the other
    outcomes: list[ShardOutcome] = read_shard_outcomes(Home.at(cluster.store), run_id)
    ran_on = Counter(o.host for o in outcomes)
    assert set(ran_on) == {"mai-a", "mai-b"} and sum(ran_on.values()) == 4, ran_on
    assert [o.host for o in outcomes if Path(o.shard_path).stem == lost] == [f"mai-{survivor}"], outcomes
    assert not cluster.hosts[victim].alive() and cluster.hosts[survivor].alive()
    # the lost shard's subflow run on the killed host ended Crashed within a minute, naming the host (the parent
    # marks it when the drain's lease has been free for LEASE_GRACE_S); its run on the survivor Completed
    lost_runs = [run.state for run in flow_runs_at(cluster.api_url, run_id, "shard") if run.name == lost and run.state]
    assert sorted(state.name for state in lost_runs) == ["Completed", "Crashed"], lost_runs
    [crashed] = [state for state in lost_runs if state.name == "Crashed"]
    assert f"on mai-{victim} died" in (crashed.message or ""), crashed
    assert (crashed.timestamp - killed_at).total_seconds() < 60, (crashed.timestamp, killed_at)
    # each process that ran shards (a drain on a worker) loaded each model at most once, however many shards it ran
    loads = Counter((o.host, o.pid, model) for o in outcomes for model in o.loaded_models)
    assert loads and max(loads.values()) == 1, loads
    # nothing computed twice: every identity the run needed is in the files once, written by this run. What the
    # lost host stored before it died is kept, not computed again: the surviving shards' engines computed the rest
    rows = stored_rows(cluster.store)
    ids = [r["gen_id"] for r in rows]
    assert len(ids) == len(set(ids)), "an identity was generated twice"
    counts = fanned["counts"]
    assert isinstance(counts, dict)
    assert counts["generations_computed"] == counts["generations_needed"] == len(ids) > 0
    assert {r["run_id"] for r in rows} == {run_id}
    assert counts["generations_needed"] == local["counts"]["generations_needed"]  # type: ignore[index]
    assert 0 < counts["engine_generations"] <= counts["generations_computed"]
    assert counts["engine_generations"] == sum(o.tally.generations for o in outcomes)
    assert not any(lease_is_held(shard_lease_path(Home.at(cluster.store), run_id, o.shard_path)) for o in outcomes)


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
    """Host c serves the model on its 127.0.0.1 and registers it in the shared store; on host d, which shares the
    store but not the loopback, a shard's lookup finds nothing and leaves c's entry; d then serves on the same port
    of its own loopback (the same URL): d uses its own server, and once it is gone drops its own entry only; c's
    lookup still finds its server."""
    store = tmp_path / "store"
    store.mkdir()
    idle = ["sleep", "infinity"]
    hosts = {label: start_host(cluster.bridge, label, store, idle, {}, tmp_path / f"{label}.log") for label in "cd"}
    try:
        wait_for_namespaces(hosts.values())
        serving = subprocess.Popen(on_host(hosts["c"], [sys.executable, "-c", SERVE_AND_REGISTER], {}),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert serving.stdout is not None and serving.stdin is not None
        url_on_c = serving.stdout.readline().strip()
        assert url_on_c.startswith("http://127.0.0.1:"), serving.communicate(timeout=30)
        assert registry_hosts(store) == {"mai-c": url_on_c}

        looked_up = subprocess.run(on_host(hosts["d"], [sys.executable, "-c", LOOK_UP, url_on_c], {}),
                                   capture_output=True, text=True, timeout=120, check=True)
        assert looked_up.stdout.split() == ["none", "False"]  # not c's server, which d cannot reach
        assert registry_hosts(store) == {"mai-c": url_on_c}   # and c's entry is still there

        port_on_c = url_on_c.rsplit(":", 1)[1]
        on_d = subprocess.Popen(on_host(hosts["d"], [sys.executable, "-c", SERVE_AND_REGISTER, port_on_c], {}),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert on_d.stdout is not None
        assert on_d.stdout.readline().strip() == url_on_c  # the same URL, another host's server
        assert registry_hosts(store) == {"mai-c": url_on_c, "mai-d": url_on_c}
        # while it lives, d's own server is the one d uses; then it ends (the process exits after its lookup)
        assert on_d.communicate("\n", timeout=60)[0].strip() == url_on_c
        again = subprocess.run(on_host(hosts["d"], [sys.executable, "-c", LOOK_UP, url_on_c], {}),
                               capture_output=True, text=True, timeout=120, check=True)
        assert again.stdout.split() == ["none", "False"]
        assert registry_hosts(store) == {"mai-c": url_on_c}   # d dropped its dead entry, and only its own

        out, err = serving.communicate("\n", timeout=60)
        assert out.strip() == url_on_c, err[-2000:]            # c still finds and uses its own server
    finally:
        for host in hosts.values():
            host.kill()


def wait_for_namespaces(hosts: object) -> None:
    """A host's namespaces exist once its first process runs the command (the mounts are made before it)."""
    deadline = time.monotonic() + 30
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
