"""The temporary Prefect servers' databases (flows/prefect_api.py): one per store, kept to a bound, never one a
command is starting a server on; and a run's Prefect calls once its API is lost. No server is started here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def test_the_temporary_servers_databases_are_kept_to_a_bound(tmp_path: Path) -> None:
    """The most recently used databases are kept, and any used lately; an old one beyond the bound goes, unless a
    command is starting a server on it (its start lock held)."""
    import fcntl
    import time

    from mai.flows.prefect_api import prune_server_databases

    stores, day = tmp_path / "mai-stores", 86400.0
    for index in range(6):
        folder = stores / f"store-{index}"
        folder.mkdir(parents=True)
        (folder / "prefect.db").write_bytes(b"")
        (folder / "start.lock").write_bytes(b"")
        age = time.time() - {1: 3 * day, 5: day / 2}.get(index, index * 10 * day)  # days since its last use
        for file in [*folder.iterdir(), folder]:
            os.utime(file, (age, age))
    with open(stores / "store-4" / "start.lock", "a") as busy:
        fcntl.flock(busy, fcntl.LOCK_EX)  # a command starting a server on store-4's database now
        removed = prune_server_databases(stores, keep=2, idle_s=7 * day)
    assert sorted(p.name for p in removed) == ["store-2", "store-3"]
    assert sorted(p.name for p in stores.iterdir()) == ["store-0", "store-1", "store-4", "store-5"]


def test_a_database_goes_with_its_store(tmp_path: Path) -> None:
    """A database whose store is gone (removed, or another store now at its root) goes at once, however recently
    used; one whose store is there stays, and so does one without the record of its store."""
    from mai.flows.prefect_api import STORE_RECORD, prune_server_databases
    from mai.storage.paths import Home, store_id

    stores = tmp_path / "mai-stores"
    kept, removed, replaced = (Home.at(tmp_path / name) for name in ("kept", "removed", "replaced"))
    for home in (kept, removed, replaced):
        folder = stores / store_id(home)
        folder.mkdir(parents=True)
        (folder / "prefect.db").write_bytes(b"")
        (folder / STORE_RECORD).write_text(str(home.root))
    (stores / "from-before-the-record").mkdir()
    gone = {stores / store_id(removed), stores / store_id(replaced)}
    shutil.rmtree(removed.root)
    shutil.rmtree(replaced.root)
    store_id(Home.at(replaced.root))  # a new store at the same root: another id
    assert set(prune_server_databases(stores)) == gone
    assert sorted(p.name for p in stores.iterdir()) == sorted([store_id(kept), "from-before-the-record"])



def lost(url: str) -> Exception:
    """What Prefect's client raises once its retries are spent on a dead server at `url`."""
    import httpx

    return httpx.ConnectError("refused", request=httpx.Request("POST", f"{url}/flow_runs/filter"))


def test_once_its_api_is_lost_a_runs_later_calls_fail_at_once_and_the_process_keeps_its_retries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flow body's error that is a lost API (a failed request to the configured API's URL) turns the client's
    retries off under the run's settings (`ensure_api`'s copy), so the engines' last calls do not each wait out a
    minute of retries; the process's own settings keep theirs, and so does a run whose error was another one (a
    refused connection to somewhere else, a bug)."""
    import httpx
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    from mai.flows import prefect_api
    from mai.storage.paths import Home

    url = "http://127.0.0.1:9/api"
    monkeypatch.setattr(prefect_api, "_temporary", None)  # this process started no temporary server
    with temporary_settings({PREFECT_API_URL: url}):  # a configured API
        retries = PREFECT_CLIENT_MAX_RETRIES.value()
        assert retries > 0
        for error in (httpx.ConnectError("refused", request=httpx.Request("GET", "http://127.0.0.1:9/models")),
                      ValueError("a bug")):
            with prefect_api.ensure_api(Home.at(tmp_path)), pytest.raises(type(error)), \
                    prefect_api.failing_fast_once_lost():
                raise error
        assert PREFECT_CLIENT_MAX_RETRIES.value() == retries
        with prefect_api.ensure_api(Home.at(tmp_path)):
            with pytest.raises(httpx.ConnectError), prefect_api.failing_fast_once_lost():
                raise lost(url)
            assert PREFECT_CLIENT_MAX_RETRIES.value() == 0  # the engines' calls after the flow body's
        assert PREFECT_CLIENT_MAX_RETRIES.value() == retries


@pytest.mark.parametrize("flow", ["mai-run", "mai-shard"])
def test_the_run_and_shard_flows_fail_fast_once_their_api_is_lost(flow: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """The bodies of `mai-run` and `mai-shard` (where a run's calls to the API are made: a shard's progress
    artifact, its steps' task runs, the parent's watch of its drains) turn the retries off when the API is lost in
    them (the flow's function alone, without Prefect's engine)."""
    import httpx
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    from mai.flows import run, shard

    url = "http://127.0.0.1:9/api"

    def losing(*_: object) -> None:
        raise lost(url)

    monkeypatch.setattr(*((run, "_run", losing) if flow == "mai-run" else (shard, "plan_on_this_host", losing)))
    with temporary_settings({PREFECT_API_URL: url}):
        with pytest.raises(httpx.ConnectError):
            (run.mai_run.fn(None) if flow == "mai-run" else shard.mai_shard.fn(None, "shard-00000"))
        assert PREFECT_CLIENT_MAX_RETRIES.value() == 0
