"""Where everything lives under the store root (`MAI_HOME`, default `~/.mai`). Works on a shared filesystem, which
machines may mount at different paths: each store has a stable id (`store.json` at its root), and a worker finds
the store a plan names by that id (`locate_store`)."""

from __future__ import annotations

import json
import os
import uuid
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mai.errors import ConfigError
from mai.host import host_name

if TYPE_CHECKING:  # only the names: paths stay importable without pyarrow (tables.py) and pydantic (the plan)
    from mai.plan import RunPlan
    from mai.storage.tables import TableName


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def at(cls, root: str | Path | None = None) -> Home:
        return cls(Path(root or os.environ.get("MAI_HOME", "~/.mai")).expanduser().resolve())

    @property
    def id_file(self) -> Path:
        """`store.json`: the store's id, written once when the store is first used, never changed."""
        return self.root / "store.json"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def fingerprints(self) -> Path:
        """Where local datasets' fingerprints and the hashes of the files their samples read are kept between runs
        (mai/evals/fingerprint_cache.py): a dot file, which no dataset loader reads as data, beside the generated
        benchmarks' data."""
        return self.datasets / ".fingerprints.json"

    @property
    def benchmark_specs(self) -> Path:
        """The specs of the store's spec benchmarks (storage/benchmark_specs.py)."""
        return self.root / "benchmarks"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def store(self) -> Path:
        """The Parquet files: a directory per table (storage/tables.py), plus claims and partition versions."""
        return self.root / "store"

    def table_dir(self, name: TableName) -> Path:
        return self.store / name

    # the directories of the tables that several modules write or read (the others: `table_dir`)
    @property
    def generations(self) -> Path:
        return self.table_dir("generations")

    @property
    def routes(self) -> Path:
        return self.table_dir("routes")

    @property
    def runs(self) -> Path:
        return self.table_dir("runs")

    @property
    def claims(self) -> Path:
        """Live claims on identities being generated (storage/claims.py); empty when nothing runs."""
        return self.store / "claims"

    @property
    def locks(self) -> Path:
        """Lock files of short critical sections (claiming, materialising, building assets)."""
        return self.root / "locks"

    @property
    def catalog(self) -> Path:
        return self.root / "catalog.duckdb"


def store_id(home: Home) -> str:
    """The store's id, created on first use. Atomic and race-free across hosts: the id file is written whole under
    a temp name, then hard-linked to `store.json`, which fails if another process created it first (then its id
    wins); a reader never sees a partial file and the id never changes once visible."""
    found = read_store_id(home.root)
    if found is not None:
        return found
    home.root.mkdir(parents=True, exist_ok=True)
    record = {"store_id": uuid.uuid4().hex, "created_at": datetime.now(UTC).isoformat(), "created_on": host_name()}
    temp = home.root / f".tmp-store-{uuid.uuid4().hex}.json"
    try:
        with open(temp, "w") as handle:
            handle.write(json.dumps(record, indent=2) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with suppress(FileExistsError):  # another process made the store's id first: it is the one
            os.link(temp, home.id_file)
    finally:
        temp.unlink(missing_ok=True)
    created = read_store_id(home.root)
    assert created is not None  # just linked, or linked by the process that won
    return created


def read_store_id(root: Path) -> str | None:
    """The id of the store at `root`, None when there is none (no store there, or one from before store ids)."""
    try:
        text = (root / "store.json").read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        found = json.loads(text)["store_id"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{root / 'store.json'} is not a store's id file (JSON with 'store_id'): restore it from "
                          "another host's copy of the store, or remove it if this is not a shared store") from None
    return str(found)


def locate_store(plan_home: str, planned_id: str) -> Home:
    """The store a plan names, as this host mounts it: `plan_home` (the path the plan was made with) if it holds
    the store `planned_id`, else `$MAI_HOME` (where this host mounts the store) if that does. Checking the id keeps
    a worker from writing into another store that happens to sit at the planned path (a host's own local
    `~/.mai`). A plan made without an id (before store ids) is taken at `plan_home`, as it always was."""
    planned = Home.at(plan_home)
    if not planned_id or read_store_id(planned.root) == planned_id:
        return planned
    mapped = os.environ.get("MAI_HOME")
    if mapped and read_store_id(Home.at(mapped).root) == planned_id:
        return Home.at(mapped)
    raise ConfigError(f"store {planned_id} is not at {planned.root} (where the run was planned) on host {host_name()}, "
                      f"nor at MAI_HOME={mapped or '(unset)'}: set MAI_HOME on this worker to the path where it "
                      "mounts the run's store")


def plan_on_this_host(plan: RunPlan) -> RunPlan:
    """The plan as this host runs it, what a shard or drain flow calls first on a worker: its store where this host
    mounts it (`locate_store`; every path derived from `plan.home` then lies there: models, leases, outcomes,
    claims, the vLLM server registry), and its local models re-resolved and checked on this host
    (mai.plan.localize_models). The plan itself when nothing differs."""
    from mai.evals.fingerprint_cache import FingerprintCache
    from mai.plan import localize_models

    home = locate_store(plan.home, plan.store_id)
    mapped = plan if str(home.root) == plan.home else plan.model_copy(update={"home": str(home.root)})
    return localize_models(mapped, home.models, FingerprintCache(home.fingerprints))
