"""One store mounted at different paths on different hosts (#32): each store has a stable id (`store.json`), the
plan carries it, and a worker finds the store by it: at the planned path if that holds the store, else at its own
`MAI_HOME`, else a clear error. Another host's view is made for real: a mount namespace (`unshare -m`) in which the
store is bind-mounted at another path and the planned path is hidden, or holds another store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mai.config import RunConfig
from mai.errors import ConfigError
from mai.plan import RunPlan, StoreLocations, build_plan
from mai.storage.paths import Home, locate_store, plan_on_this_host, read_store_id, store_id
from tests.helpers import seeded_store


def new_store(root: Path, assets_home: Path) -> Home:
    """A store with the built-in models and demo data (what planning a default run needs), and its id."""
    seeded_store(root, assets_home)
    home = Home.at(root)
    store_id(home)
    return home


def plan_on(home: Home) -> RunPlan:
    """The plan a parent makes on `home` (its locations with the store's id, as flows/plan.store_locations gives)."""
    locations = StoreLocations(root=home.root, models=home.models, datasets=home.datasets, store_id=store_id(home))
    return build_plan(RunConfig(home=str(home.root), limit=2), locations)


def test_a_store_id_is_made_once_and_never_changes(tmp_path: Path) -> None:
    home = Home.at(tmp_path / "store")
    assert read_store_id(home.root) is None
    first = store_id(home)
    assert len(first) == 32 and store_id(home) == first == read_store_id(home.root)
    assert json.loads(home.id_file.read_text())["store_id"] == first
    assert not list(home.root.glob(".tmp-*"))


def test_processes_creating_one_store_at_once_agree_on_its_id(tmp_path: Path) -> None:
    code = "import sys; from mai.storage.paths import Home, store_id; print(store_id(Home.at(sys.argv[1])))"
    children = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "new")], stdout=subprocess.PIPE,
                                 text=True) for _ in range(6)]
    ids = {child.communicate(timeout=120)[0].strip() for child in children}
    assert all(child.returncode == 0 for child in children)
    assert len(ids) == 1 and ids == {read_store_id(tmp_path / "new")}


def test_the_plan_carries_the_store_id(tmp_path: Path, assets_home: Path) -> None:
    home = new_store(tmp_path / "store", assets_home)
    plan = plan_on(home)
    assert plan.store_id == read_store_id(home.root) and plan.home == str(home.root)
    received = RunPlan.model_validate_json(plan.model_dump_json())  # as a worker receives it
    assert received.store_id == plan.store_id
    assert plan_on_this_host(received) == received  # on the planning host (or one mounting it there): unchanged


def test_locate_store_prefers_the_planned_path_then_mai_home_else_says_what_to_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Home.at(tmp_path / "shared")
    planned = store_id(store)
    view = tmp_path / "mnt" / "store"  # the same store under another path (a link: a second name for it)
    view.parent.mkdir()
    view.symlink_to(store.root)
    other = Home.at(tmp_path / "local")  # another store: a host's own ~/.mai at the planned path
    store_id(other)

    monkeypatch.delenv("MAI_HOME", raising=False)
    assert locate_store(str(store.root), planned) == store
    monkeypatch.setenv("MAI_HOME", str(view))
    assert locate_store(str(tmp_path / "gone"), planned) == Home.at(view)
    assert locate_store(str(other.root), planned).root == store.root  # the planned path holds another store
    assert locate_store(str(tmp_path / "gone"), "").root == tmp_path / "gone"  # a plan from before store ids

    monkeypatch.setenv("MAI_HOME", str(other.root))
    with pytest.raises(ConfigError) as error:
        locate_store(str(tmp_path / "gone"), planned)
    message = str(error.value)
    assert planned in message and str(tmp_path / "gone") in message and str(other.root) in message
    assert "set MAI_HOME on this worker" in message


def test_a_broken_id_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "store.json").write_text("not json")
    with pytest.raises(ConfigError, match=r"store.json is not a store's id file"):
        read_store_id(tmp_path)


# the worker's side, in another host's mount namespace: locate the store, then re-resolve the plan's models there
WORKER = """
import json, sys
from mai.plan import RunPlan
from mai.storage.paths import Home, plan_on_this_host
from mai.errors import ConfigError

plan = RunPlan.model_validate_json(open(sys.argv[1]).read())
try:
    plan = plan_on_this_host(plan)
except ConfigError as error:
    print(json.dumps({"error": str(error)}))
    raise SystemExit(0)
print(json.dumps({"home": plan.home, "models": {r: m.name_or_path for r, m in plan.models.items()},
                  "runs": str(Home.at(plan.home).runs)}))
"""


def on_host_b(tmp_path: Path, plan: RunPlan, mai_home: Path | None, setup: str = "") -> dict[str, str]:
    """Runs WORKER where the store (host-a/store) is bind-mounted at host-b/store and host-a is an empty tmpfs
    (the planned path does not exist), after `setup` (shell, in that namespace)."""
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.model_dump_json())
    (tmp_path / "host-b" / "store").mkdir(parents=True, exist_ok=True)
    script = (f"mount --bind {tmp_path}/host-a/store {tmp_path}/host-b/store && "
              f"mount -t tmpfs tmpfs {tmp_path}/host-a && {setup or 'true'} && exec \"$@\"")
    env = {k: v for k, v in os.environ.items() if k != "MAI_HOME"} | ({"MAI_HOME": str(mai_home)} if mai_home else {})
    child = subprocess.run(["unshare", "-m", "sh", "-c", script, "host-b", sys.executable, "-c", WORKER,
                            str(plan_file)], check=False, capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    result: dict[str, str] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.cluster
def test_a_worker_mounting_the_store_elsewhere_maps_every_path_to_its_mount(tmp_path: Path, assets_home: Path
                                                                            ) -> None:
    home = new_store(tmp_path / "host-a" / "store", assets_home)
    plan = plan_on(home)
    mount_b = tmp_path / "host-b" / "store"

    seen = on_host_b(tmp_path, plan, mai_home=mount_b)
    assert seen["home"] == str(mount_b) and seen["runs"] == str(mount_b / "store" / "runs")
    assert seen["models"] == {role: str(mount_b / "models" / Path(spec.name_or_path).name)
                              for role, spec in plan.models.items()}  # the built-in models, from the mount

    missing = on_host_b(tmp_path, plan, mai_home=None)["error"]
    assert f"store {plan.store_id} is not at {home.root}" in missing and "MAI_HOME=(unset)" in missing

    # host B has a store of its own at the planned path: never used for this run's work
    own_store = (f"mkdir -p {home.root} && {sys.executable} -c 'import sys; from mai.storage.paths import Home, "
                 f"store_id; store_id(Home.at(sys.argv[1]))' {home.root}")
    assert on_host_b(tmp_path, plan, mai_home=mount_b, setup=own_store)["home"] == str(mount_b)
    wrong = on_host_b(tmp_path, plan, mai_home=None, setup=own_store)["error"]
    assert "set MAI_HOME on this worker to the path where it mounts the run's store" in wrong
    assert home.id_file.exists() and read_store_id(home.root) == plan.store_id  # host B changed nothing here
