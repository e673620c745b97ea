"""The temporary Prefect servers' databases (flows/prefect_api.py): one per store, kept to a bound, never one a
command is starting a server on. No server is started here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


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
