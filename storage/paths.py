"""Where everything lives under the store root (`MAI_HOME`, default `~/.mai`). Works on a shared filesystem."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the name: paths stay importable without pyarrow (tables.py holds the schemas)
    from mai.storage.tables import TableName


def default_home() -> Path:
    return Path(os.environ.get("MAI_HOME", "~/.mai")).expanduser()


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def at(cls, root: str | Path | None = None) -> Home:
        return cls(Path(root).expanduser().resolve() if root else default_home().resolve())

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def store(self) -> Path:
        """The Parquet files: a directory per table (storage/tables.py), plus claims and partition versions."""
        return self.root / "store"

    def table_dir(self, name: TableName) -> Path:
        return self.store / name

    # the tables' directories by name, for the code that writes and reads one table
    @property
    def samples(self) -> Path:
        return self.table_dir("samples")

    @property
    def generations(self) -> Path:
        return self.table_dir("generations")

    @property
    def routes(self) -> Path:
        return self.table_dir("routes")

    @property
    def metrics(self) -> Path:
        return self.table_dir("metrics")

    @property
    def scores(self) -> Path:
        return self.table_dir("scores")

    @property
    def runs(self) -> Path:
        return self.table_dir("runs")

    @property
    def attention(self) -> Path:
        return self.table_dir("attention")

    @property
    def selections(self) -> Path:
        return self.table_dir("selections")

    @property
    def latency_profiles(self) -> Path:
        return self.table_dir("latency_profiles")

    @property
    def estimates(self) -> Path:
        return self.table_dir("estimates")

    @property
    def speculative(self) -> Path:
        return self.table_dir("speculative")

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

    @property
    def prefect_results(self) -> Path:
        return self.root / "prefect-results"
