"""The Prefect API of a `mai` command that runs a flow with none configured: a temporary server of its own, which
dies with the command however it ends (flows/prefect_api.py). A long-lived server is Prefect's own
(`prefect server start --background`), configured with PREFECT_API_URL: `mai` manages none."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from tests.helpers import seeded_store

# each test starts Prefect servers of its own (the tier of the tests that need a Prefect API)
pytestmark = pytest.mark.prefect

REPO = Path(__file__).resolve().parents[1]
PROGRESS_BAR = re.compile(r" \d+/\d+ \d+:\d\d:\d\d ")  # a line of the terminal's progress bar (on stderr)
# A client that gives up soon once its server is dead (the default five retries with backoff would take a minute per
# call) but rides out a busy database: the test's SQLite server answers 503 "Service Unavailable" while another of
# its writers holds the file (prefect.server.api.server `is_client_retryable_exception`), on a loaded machine often;
# with no retry at all that failed the run before the server was killed. Retried after 2, 4 and 8 s.
FEW_CLIENT_RETRIES = {"PREFECT_CLIENT_MAX_RETRIES": "3", "PREFECT_CLIENT_RETRY_JITTER_FACTOR": "0"}


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Prefect server database that a temporary server created and migrated (Prefect's hundred-odd migrations, most
    of a server's start), once for the module: the tests whose subject is not a fresh database start their servers
    on copies of it (`migrated_copy`, `seed_template`)."""
    from mai.flows.prefect_api import _await_api, _spawn_server

    directory = tmp_path_factory.mktemp("migrated")
    with mock.patch.dict(os.environ, {"PREFECT_HOME": str(directory / "prefect-home")}):
        server, url = _spawn_server(directory / "prefect.db")
        _await_api(server, url)
    server.terminate()
    server.wait(timeout=60)
    return directory / "prefect.db"


def migrated_copy(migrated: Path, target: Path) -> Path:
    """A copy of the module's migrated database at `target`, for a server started on it."""
    import shutil

    shutil.copyfile(migrated, target)
    return target


def seed_template(migrated: Path, prefect_home: Path) -> None:
    """The migrated database as the template of this Prefect version in `prefect_home` (flows/prefect_api.py): a
    command's temporary server there starts on a copy of it, as after any earlier first start on that machine."""
    from mai.flows.prefect_api import _template

    template = _template(prefect_home / "mai-stores")
    template.parent.mkdir(parents=True, exist_ok=True)
    migrated_copy(migrated, template)


def session_processes(session: int) -> list[int]:
    """Processes whose session id is `session` (field 6 of /proc/PID/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:
            found.append(int(stat.parent.name))
    return found


def test_a_killed_run_leaves_no_process_behind(tmp_path: Path, assets_home: Path) -> None:
    """SIGKILL of `mai run` while it generates: the temporary Prefect server it started dies with it."""
    import signal
    import time

    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(HF_HUB_OFFLINE="1", PREFECT_LOGGING_LEVEL="WARNING", PREFECT_HOME=str(tmp_path / "a-fresh-prefect-home"))  # not made yet
    home = seeded_store(tmp_path / "store", assets_home)
    with open(tmp_path / "run.log", "wb") as log:
        run = subprocess.Popen([sys.executable, "-m", "mai.cli", "--home", str(home), "run", "--limit", "24",
                                "--shards", "1", "--max-new-tokens", "R=64"], cwd=REPO, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(home.glob("store/generations/*/S/*.parquet")) and time.monotonic() < deadline:
        assert run.poll() is None, (tmp_path / "run.log").read_text()[-2000:]
        time.sleep(0.2)
    assert len(session_processes(run.pid)) >= 2, "the run had not started its temporary server"
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 20
    while session_processes(run.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(run.pid) == []


def test_temporary_servers_started_together_share_a_fresh_database(tmp_path: Path) -> None:
    """Three commands on one store that start their temporary Prefect server at once on one fresh PREFECT_HOME all
    get one: the starts take turns, so no two servers migrate the store's new database together (alembic failed
    all but one: 3 of 4 tries with three servers before the lock)."""
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "a-fresh-prefect-home"), PREFECT_LOGGING_LEVEL="WARNING")
    start = ("from mai.flows.prefect_api import start_temporary_server; from mai.storage.paths import Home; "
             f"start_temporary_server(Home.at({str(tmp_path / 'store')!r})); print('ok')")
    starts = [subprocess.Popen([sys.executable, "-c", start], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(3)]
    results = [process.communicate(timeout=300) for process in starts]
    assert [out.strip() for out, _ in results] == ["ok"] * 3, [err[-1500:] for _, err in results]


def test_a_stores_first_server_starts_on_a_copy_of_a_migrated_database(tmp_path: Path) -> None:
    """The first start on a fresh PREFECT_HOME migrates a new database and keeps a copy of it as the template of
    this Prefect version; the first start for another store starts on a copy of that template (a database at
    Prefect's head revision), and its API answers."""
    import sqlite3

    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "a-fresh-prefect-home"), PREFECT_LOGGING_LEVEL="WARNING")
    start = ("import sys, urllib.request; from mai.flows.prefect_api import start_temporary_server; "
             "from mai.storage.paths import Home; url = start_temporary_server(Home.at(sys.argv[1])); "
             "print(urllib.request.urlopen(url + '/health').status)")
    for store in ("store-a", "store-b"):
        done = subprocess.run([sys.executable, "-c", start, str(tmp_path / store)], env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.stdout.strip() == "200", done.stderr[-2000:]
        templates = list((tmp_path / "a-fresh-prefect-home" / "mai-stores").glob("template-prefect-*.db"))
        assert len(templates) == 1
    with sqlite3.connect(templates[0]) as template:
        assert template.execute("SELECT version_num FROM alembic_version").fetchone()
        assert template.execute("SELECT count(*) FROM flow_run").fetchone() == (0,)


def test_runs_on_two_stores_do_not_wait_on_each_other_for_their_servers(
        tmp_path: Path, migrated_database: Path, assets_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `mai run` on two stores, started together with no server configured: while the first is held at its
    server start (the test holds that store's start lock), the second starts its own server and completes. Before,
    every temporary server's start took one lock for the whole machine, and runs on unrelated stores waited 2-5
    minutes on each other."""
    import fcntl

    from mai.flows.prefect_api import server_start_lock
    from mai.storage.paths import Home

    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(HF_HUB_OFFLINE="1", PREFECT_LOGGING_LEVEL="WARNING", PREFECT_HOME=str(tmp_path / "prefect-home"))
    seed_template(migrated_database, tmp_path / "prefect-home")  # the servers' start, not a migration, is the subject
    args = ["run", "--limit", "2", "--shards", "1", "--max-new-tokens", "S=4", "--max-new-tokens", "R=4",
            "--max-new-tokens", "RT=4"]
    stores = [seeded_store(tmp_path / name, assets_home) for name in ("store-a", "store-b")]
    monkeypatch.setenv("PREFECT_HOME", env["PREFECT_HOME"])  # the lock where the commands' own PREFECT_HOME puts it
    lock_path = server_start_lock(Home.at(stores[0]))
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # store A's run waits here, as behind another start on its store
        runs = [subprocess.Popen([sys.executable, "-m", "mai.cli", "--home", str(store), *args], cwd=REPO,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for store in stores]
        out_b, _ = runs[1].communicate(timeout=600)
        assert runs[1].returncode == 0, out_b[-2000:]
        assert runs[0].poll() is None, "the run on store A did not wait at its own store's server start"
    out_a, _ = runs[0].communicate(timeout=600)  # released: A starts its server and completes
    assert runs[0].returncode == 0, out_a[-2000:]


def test_the_settings_alone_decide_on_the_temporary_server(tmp_path: Path, migrated_database: Path,
                                                           assets_home: Path) -> None:
    """A notebook that imported Prefect before any API was set, then runs: its settings name no API, so the run
    gets mai's temporary server (the store's database, dying with the process), not Prefect's own, and its flow run
    is recorded there. Before, an imported Prefect counted as a configured API and Prefect started a server of its
    own, which outlives a killed process. The run's prompts are new, so its server starts before they are counted
    (`start_early`: the two overlap)."""
    import json

    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env.update(HF_HUB_OFFLINE="1", PREFECT_LOGGING_LEVEL="WARNING", PREFECT_HOME=str(tmp_path / "prefect-home"))
    seed_template(migrated_database, tmp_path / "prefect-home")
    seeded_store(tmp_path / "store", assets_home)
    script = f"""
import json
import prefect.flows  # first: Prefect reads its settings now, and they name no API
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings
from mai import api
from mai.config import RunConfig
from mai.flows import prefect_api
import mai.run.prompt_limits as limits
begun = []
count = limits.refused_samples
def counting(plan, samples):
    begun.append(prefect_api._temporary is not None)
    return count(plan, samples)
limits.refused_samples = counting
manifest = api.run(RunConfig(home={str(tmp_path / "store")!r}, limit=2, shards=1,
                             max_new_tokens={{"S": 4, "R": 4, "RT": 4}}), progress=False)
assert prefect_api._temporary is not None, "mai started no temporary server"
with temporary_settings(updates={{PREFECT_API_URL: prefect_api._temporary[1]}}):
    with get_client(sync_client=True) as client:
        names = [run.name for run in client.read_flow_runs()]
print(json.dumps({{"run": manifest["run_name"], "flow_runs": names, "begun_before_counting": begun}}))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert f"mai-run/{result['run']}" in result["flow_runs"]
    assert result["begun_before_counting"] and all(result["begun_before_counting"]), result


def test_a_run_whose_prefect_api_dies_fails_with_one_line_and_resumes(
        tmp_path: Path, migrated_database: Path, assets_home: Path, record_property: Callable[[str, object], None]
) -> None:
    """The configured Prefect server dies while `mai run` generates: the command fails with one line (no traceback,
    none of Prefect's own reports of the dead API, also while its client retries), once the call that found the API
    gone has retried (the calls after it fail at once: `failing_fast_once_lost`), and keeps what it stored; run
    again, it computes only the rest."""
    import json
    import signal
    import time

    import pyarrow.parquet as pq

    from mai.flows.prefect_api import _await_api, _spawn_server

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PREFECT_LOGGING_LEVEL": "WARNING", **FEW_CLIENT_RETRIES,
           "PREFECT_HOME": str(tmp_path / "prefect-home")}
    seed_template(migrated_database, tmp_path / "prefect-home")  # for the re-run's temporary server
    with mock.patch.dict(os.environ, {"PREFECT_HOME": env["PREFECT_HOME"]}):  # the server's database: its own
        server, url = _spawn_server(migrated_copy(migrated_database, tmp_path / "prefect.db"))
        _await_api(server, url)
    home = seeded_store(tmp_path / "store", assets_home)
    command = [sys.executable, "-m", "mai.cli", "--home", str(home), "run", "--limit", "12", "--shards", "2",
               "--max-new-tokens", "R=32", "--json"]
    run = subprocess.Popen(command, cwd=REPO, env={**env, "PREFECT_API_URL": url}, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(home.glob("store/generations/*/*/*.parquet")) and time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        time.sleep(0.1)
    server.send_signal(signal.SIGKILL)
    server.wait()
    killed = time.monotonic()
    out, err = run.communicate(timeout=300)
    failed_s = time.monotonic() - killed
    assert run.returncode == 1 and out == "", (out, err)
    # the time, not a check (the run computes until its next call, seconds on a loaded machine): that the calls
    # after the first fail at once is tests/test_prefect_server_databases.py's, this is docs/benchmarks.md's
    record_property("measured", f"a run failed {failed_s:.1f} s after its Prefect API died (3 retries: 2, 4, 8 s)")
    said = [line for line in err.splitlines() if not PROGRESS_BAR.search(line)]
    assert len(said) == 1 and said[0].startswith(f"error: the Prefect API at {url} stopped answering"), err
    stored = {row["gen_id"] for path in home.glob("store/generations/*/*/*.parquet")
              for row in pq.read_table(path, columns=["gen_id"]).to_pylist()}
    assert stored

    # again with a temporary server of its own and the client's default retries: the re-run is a user's normal run,
    # and with none a busy machine's slow SQLite answer alone fails it
    env.pop("PREFECT_API_URL", None)
    for setting in FEW_CLIENT_RETRIES:
        env.pop(setting)
    again = subprocess.run(command, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    counts = json.loads(again.stdout)["counts"]
    assert 0 < counts["generations_computed"] == counts["generations_needed"] - len(stored), counts


# `mai` with the configured Prefect server killed the moment the run's manifest and runs row are written, before its
# artifacts are published and its flow run ends: deterministic, where killing the server from outside would race
API_DIES_AFTER_THE_STORE = """
import os, signal, socket, sys, time
import mai.run.finish as finish
server_pid, port = int(sys.argv[1]), int(sys.argv[2])
write_manifest = finish.write_manifest
def write_then_lose_the_api(*args, **kwargs):
    write_manifest(*args, **kwargs)
    os.kill(server_pid, signal.SIGKILL)
    while socket.socket().connect_ex(("127.0.0.1", port)) == 0:  # until the port refuses connections
        time.sleep(0.05)
finish.write_manifest = write_then_lose_the_api
from mai.cli import main
sys.exit(main(sys.argv[3:]))
"""


def test_a_run_in_the_store_is_completed_though_its_prefect_api_died(tmp_path: Path, migrated_database: Path,
                                                                     assets_home: Path) -> None:
    """Recording in Prefect never changes a run's outcome: the configured server dies after the run is written to
    the store (publishing its artifacts and ending its flow run fail), and the command still reports the run as
    completed with its stored manifest (api/__init__.py, `_completed_in_store`)."""
    import json
    import signal
    from urllib.parse import urlparse

    from mai.flows.prefect_api import _await_api, _spawn_server
    from mai.storage.paths import Home
    from mai.storage.runs import is_complete, read_manifest

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PREFECT_LOGGING_LEVEL": "WARNING", **FEW_CLIENT_RETRIES,
           "PREFECT_HOME": str(tmp_path / "prefect-home")}
    with mock.patch.dict(os.environ, {"PREFECT_HOME": env["PREFECT_HOME"]}):  # the server's database: its own
        server, url = _spawn_server(migrated_copy(migrated_database, tmp_path / "prefect.db"))
        _await_api(server, url)
    try:
        home = seeded_store(tmp_path / "store", assets_home)
        done = subprocess.run(
            [sys.executable, "-c", API_DIES_AFTER_THE_STORE, str(server.pid), str(urlparse(url).port), "--home",
             str(home), "run", "--limit", "2", "--shards", "1", "--max-new-tokens", "S=4", "--max-new-tokens", "R=4",
             "--max-new-tokens", "RT=4", "--json"],
            cwd=REPO, env={**env, "PREFECT_API_URL": url}, capture_output=True, text=True, timeout=300, check=False)
        killed = server.wait(timeout=10)  # by the command, once the run was in the store
    finally:
        server.kill()
        server.wait()
    assert killed == -signal.SIGKILL and done.returncode == 0, (killed, done.stderr[-4000:])
    manifest = json.loads(done.stdout)
    assert manifest["counts"]["generations_computed"] > 0  # it ran a flow (a stored run never calls the API)
    assert is_complete(Home.at(str(home)), manifest["run_id"])
    assert {k: v for k, v in manifest.items() if k not in ("home", "catalog")} == read_manifest(
        Home.at(str(home)), manifest["run_id"])
