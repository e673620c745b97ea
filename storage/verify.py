"""`mai store verify`: the store's checks, and `--repair`.

Each check is a small function over one scan of the store (`StoreScan`: every table's files, each file's footer
read once) that returns `Finding`s, one result type for all: what is wrong (one line), whether it is a problem (the
command then exits 1) or a note, and its remedy: the files `--repair` moves into the store's quarantine folder, a
temp file it removes, or the catalog it rebuilds, with what the next run (or command) then computes again. A new
check is one function added to `CHECKS`.

Repair never deletes a file of the store: a damaged one is moved to `store/quarantine/<time>/`, under its path
inside the store, where no table's listing finds it. A sample shard set moves whole (the next run materialises it
again), as does a run's `run.parquet` when the run lost its routes or manifest (the run no longer counts as
complete: its configuration run again reuses every output that is stored).
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from mai.errors import ConfigError
from mai.storage.catalog import build_catalog
from mai.storage.damage import parquet_damage
from mai.storage.image_assets import asset_files, asset_path, image_damage
from mai.storage.parquet import read_columns
from mai.storage.partitions import listed_files, not_a_folder, partitions, row_keys
from mai.storage.paths import Home
from mai.storage.runs import manifest_damage
from mai.storage.samples import missing_shards
from mai.storage.split_check import runs_reading_another_split
from mai.storage.tables import CONTENT_ADDRESSED, TABLES, TableName
from mai.types import STAGE_NAMES

TEMP_AGE_S = 600.0  # a temp file older than this belongs to a writer that died
QUARANTINE = "quarantine"  # the folder under `store/` that repair moves damaged files into

Remedy = Literal["quarantine", "remove-temp", "rebuild-catalog", ""]


@dataclass(frozen=True)
class Finding:
    """One thing a check found. `targets`: what the remedy moves (quarantine) or removes (remove-temp); `next_run`:
    what comes back, and how, once the remedy is applied."""

    check: str
    message: str
    problem: bool = True
    remedy: Remedy = ""
    targets: tuple[Path, ...] = ()
    next_run: str = ""


@dataclass
class StoreScan:
    """Every table's listed files (damaged ones included), why each unreadable one is, each readable one's schema."""

    home: Home
    listed: dict[TableName, list[Path]]
    damage: dict[Path, str] = field(default_factory=dict)
    schemas: dict[Path, pa.Schema] = field(default_factory=dict)

    def readable(self, name: TableName) -> list[Path]:
        return [path for path in self.listed[name] if path not in self.damage]

    @property
    def complete_runs(self) -> dict[str, Path]:
        """run id -> its `runs` directory, for the runs whose `run.parquet` is readable (the completed runs)."""
        return {path.parent.name: path.parent for path in self.readable("runs")}


def scan_store(home: Home) -> StoreScan:
    scan = StoreScan(home, {table.name: listed_files(home, table) for table in TABLES})
    for path in (p for files in scan.listed.values() for p in files):
        reason = parquet_damage(path)
        if reason is None:
            try:
                scan.schemas[path] = pq.read_schema(path)
            except (OSError, pa.ArrowException) as error:  # a footer damaged inside
                reason = " ".join(str(error).split())
        if reason is not None:
            scan.damage[path] = reason
    return scan


Check = Callable[[StoreScan], list[Finding]]


def unreadable_files(scan: StoreScan) -> list[Finding]:
    return [_quarantine("unreadable", f"{path}: unreadable ({scan.damage[path]})", scan.home, table.name, path)
            for table in TABLES for path in scan.listed[table.name] if path in scan.damage]


def schema_mismatches(scan: StoreScan) -> list[Finding]:
    """A file may lack columns added later (they read as NULL); a column it has must have the schema's type."""
    found = []
    for table in TABLES:
        for path in scan.readable(table.name):
            schema, expected = scan.schemas[path], table.schema
            wrong = [f"{f.name}: {f.type} (expected {expected.field(f.name).type})" for f in schema
                     if f.name in expected.names and not f.type.equals(expected.field(f.name).type)]
            unknown = [f.name for f in schema if f.name not in expected.names]
            if wrong or unknown:
                found.append(_quarantine("schema", f"{path}: columns of the wrong type {wrong}, unknown columns "
                                                   f"{unknown}", scan.home, table.name, path))
    return found


def _quarantine(check: str, message: str, home: Home, table: TableName, path: Path) -> Finding:
    """A damaged file of `table`: what repair moves, and what then comes back."""
    run = path.parent.name
    targets: tuple[Path, ...] = (path,)
    next_run = f"the next run that needs its {table} rows computes them again"
    if table == "samples":
        targets, next_run = (path.parent,), f"the next run over these samples materialises {run} again"
    elif table == "runs" or table == "routes":
        targets = (path, home.runs / run / "run.parquet") if table == "routes" else (path,)
        next_run = f"run {run} no longer counts as complete: run its configuration again (stored outputs are reused)"
    elif table in ("metrics", "scores"):
        next_run = f"`mai rescore {run} --profile {path.stem}` writes run {run}'s {table} again"
    elif table == "estimates":
        next_run = f"`mai estimate {run} ...` writes the estimate {path.stem} again"
    elif table == "generations":
        next_run = "the next run that needs its outputs generates them again (see the dangling routes)"
    return Finding(check, message, remedy="quarantine", targets=targets, next_run=next_run)


def damaged_images(scan: StoreScan) -> list[Finding]:
    """Every image asset hashed against its name (a run checks only the assets it reads, and trusts unchanged
    stats: storage/image_assets.py), and every asset a sample names that is missing. A damaged asset moves aside
    with the shard sets that name it, so the next run over those samples materialises them again (writing the
    image again) and computes the samples that could not run; a missing one moves its shard sets aside."""
    images = scan.home.images
    naming: dict[str, set[Path]] = {}  # digest -> the shard sets whose samples name it
    for path in scan.readable("samples"):
        for digests in read_columns([path], ["image_sha256"]).column("image_sha256").to_pylist():
            for digest in digests or ():
                naming.setdefault(digest, set()).add(path.parent)
    present = {path.name for path in asset_files(images)}
    found = [_image_finding(scan, path, f"unreadable ({reason})", naming.get(path.name, set()))
             for path in asset_files(images) if (reason := image_damage(path, path.name)) is not None]
    return found + [_image_finding(scan, asset_path(images, digest), "missing", naming[digest])
                    for digest in sorted(set(naming) - present)]


def _image_finding(scan: StoreScan, path: Path, state: str, sets: set[Path]) -> Finding:
    """The asset and the shard sets that name it move aside, and with them the runs that recorded its samples as
    errors (their shards were the sets' copies made while it was damaged, which no run makes again)."""
    named = sorted(sets)
    names = ", ".join(d.name for d in named)
    where = f"the image of samples of {len(named)} shard set(s) ({names})" if named else "an image no sample names"
    runs = _runs_over_damaged_copies(scan, sets)
    next_run = f"the next run over these samples materialises {names} again (writing the image again) and " \
               "computes the samples that could not run" if named else ""
    if runs:
        next_run += (f"; run(s) {', '.join(runs)} recorded them as errors and no longer count as complete: run their "
                     "configurations again")
    return Finding("images", f"{path}: {state}: {where}", remedy="quarantine",
                   targets=(path, *named, *(scan.home.runs / run / "run.parquet" for run in runs)), next_run=next_run)


def _runs_over_damaged_copies(scan: StoreScan, sets: set[Path]) -> list[str]:
    """The completed runs whose manifests name a shard of one of `sets` copied with samples whose image was damaged
    (mai/run/prompt_limits.py: `<set>/prompts-<key>-images-<hash>/`)."""
    runs = []
    for run, directory in scan.complete_runs.items():
        shards = _manifest(directory).get("shard_paths")
        copies = [scan.home.root / str(s) for s in shards] if isinstance(shards, list) else []
        if any(c.parent.parent in sets and "-images-" in c.parent.name for c in copies):
            runs.append(run)
    return sorted(runs)


def duplicate_identities(scan: StoreScan) -> list[Finding]:
    found = []
    for table in CONTENT_ADDRESSED:
        for partition in partitions(scan.home, table):
            files = [p for p in partition.listed() if p not in scan.damage]
            repeated = [key for key, n in Counter(row_keys(files, table)).items() if n > 1]
            if repeated:
                found.append(Finding("duplicates", f"{partition.path}: {len(repeated)} identities stored more than "
                                                   f"once (e.g. {repeated[0]}); `mai store compact` removes them"))
    return found


def unpublished_versions(scan: StoreScan) -> list[Finding]:
    found = []
    for table in CONTENT_ADDRESSED:
        for partition in partitions(scan.home, table):
            current = partition.current()
            if current is None or not partition.versions.exists() or not partition.path.is_symlink():
                continue
            found += [Finding("versions", f"{version}: a version no compaction published (its compaction died); the "
                                          "next one removes it")
                      for version in partition.versions.glob("v*") if version.name > current.name]
    return found


def incomplete_shard_sets(scan: StoreScan) -> list[Finding]:
    """A shard set lacking a shard (deleted) would run on part of its samples: it is moved aside whole."""
    sets = sorted({path.parent for path in scan.listed["samples"]})
    return [Finding("samples", f"{directory}: shard file {missing[0]} is missing", remedy="quarantine",
                    targets=(directory,), next_run=f"the next run over these samples materialises {directory.name} "
                                                   "again")
            for directory in sets if (missing := missing_shards(directory))]


def folders_replaced(scan: StoreScan) -> list[Finding]:
    """Where the store keeps a folder (a partition, a run's, a shard set's), a file or a link to a folder that is
    gone: every listing passes over it (its rows are lost) and a writer stops there. Repair moves it, and a
    partition's versions, aside: the next run that needs those rows computes them again."""
    found = []
    for table in TABLES:
        top = scan.home.table_dir(table.name)
        levels = table.depth if table.content_addressed else table.files.count("/")
        for level in range(1, levels + 1):
            for path in sorted(top.glob("/".join(["*"] * level))) if top.is_dir() else []:
                reason = None if path.name.startswith(".") else not_a_folder(path)
                if reason is not None:
                    found.append(_folder_finding(scan.home, table.name, path, reason))
    return found


def _folder_finding(home: Home, table: TableName, path: Path, reason: str) -> Finding:
    versions = home.store / "versions" / path.relative_to(home.store)
    targets = (path, versions) if versions.exists() else (path,)
    inside = path.relative_to(home.table_dir(table))
    next_run = f"the next run that needs the {table} rows under {inside} computes them again"
    if table == "samples":
        next_run = f"the next run over these samples materialises {path.name} again"
    elif table in ("runs", "routes"):
        next_run = f"run {path.name} no longer counts as complete: run its configuration again"
    return Finding("folders", f"{path}: {reason}", remedy="quarantine", targets=targets, next_run=next_run)


def runs_without_manifest(scan: StoreScan) -> list[Finding]:
    """A completed run has its manifest, its routes, its own scorer profile's scores and metrics, and the sample
    shards its manifest names; a manifest without a runs row is a run killed at its end, or one whose row was lost."""
    found = []
    for run, directory in scan.complete_runs.items():
        routes = scan.home.routes / run / "routes.parquet"
        if not (directory / "manifest.json").exists() or not routes.exists():
            found.append(Finding("runs", f"run {run}: complete (run.parquet) but its manifest or routes file is "
                                         "missing", remedy="quarantine", targets=(directory / "run.parquet",),
                                 next_run=f"run {run} no longer counts as complete: run its configuration again"))
            continue
        found += _run_files_missing(scan, run, _manifest(directory))
    found += [Finding("runs", f"run {d.name}: a manifest but no run.parquet: it does not count as complete (killed "
                              "as it ended, or its runs file was lost); run its configuration again", problem=False)
              for d in sorted(scan.home.runs.glob("*/")) if (d / "manifest.json").exists()
              and not (d / "run.parquet").exists() and d.name not in scan.complete_runs]
    return found


def _run_files_missing(scan: StoreScan, run: str, manifest: dict[str, object]) -> list[Finding]:
    found = []
    shards = manifest.get("shard_paths")
    missing = [s for s in shards if not (scan.home.root / s).exists()] if isinstance(shards, list) else []
    if missing:
        found.append(Finding("runs", f"run {run}: {len(missing)} sample shards of its manifest are missing "
                                     f"({missing[0]})", next_run=f"the next run over these samples materialises "
                                                                 f"{Path(missing[0]).parent.name} again"))
    profile = manifest.get("scorer_profile")
    for table in ("scores", "metrics"):
        path = scan.home.table_dir(table) / run / f"{profile}.parquet"
        if isinstance(profile, str) and not path.exists():
            found.append(Finding("runs", f"run {run}: its {table} file {path} is missing",
                                 next_run=f"`mai rescore {run} --profile {profile}` writes run {run}'s {table} again"))
    return found


def damaged_manifests(scan: StoreScan) -> list[Finding]:
    """A run's manifest.json that is not a manifest (garbage, truncated, not UTF-8): the run cannot be read back
    (`mai baseline`, `mai rescore`, timing), so it moves aside with its runs row, as a run without a manifest."""
    found = []
    for directory in sorted(scan.home.runs.glob("*/")) if scan.home.runs.is_dir() else []:
        path = directory / "manifest.json"
        reason = manifest_damage(path) if path.exists() else None
        if reason is not None:
            found.append(Finding("manifests", f"{path}: unreadable ({reason})", remedy="quarantine",
                                 targets=(path, directory / "run.parquet"),
                                 next_run=f"run {directory.name} no longer counts as complete: run its configuration "
                                          "again (stored outputs are reused)"))
    return found


def _manifest(directory: Path) -> dict[str, object]:
    try:
        loaded = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def dangling_routes(scan: StoreScan) -> list[Finding]:
    """Routes of completed runs whose generations are not in the store."""
    generated = _ids(scan, "generations", "gen_id")
    found = []
    for run, routes in _complete_routes(scan).items():
        table = read_columns([routes], ["final_gen_id", *(f"gen_{stage}" for stage in STAGE_NAMES)])
        used = {g for name in table.column_names for g in table.column(name).to_pylist() if g}
        lost = sorted(used - generated)
        if lost:
            found.append(Finding("references", f"run {run}: {len(lost)} generations its routes name are not in the "
                                               f"store (e.g. {lost[0]})",
                                 next_run=f"running run {run}'s configuration again generates its {len(lost)} "
                                          "missing generations"))
    return found


def dangling_selections(scan: StoreScan) -> list[Finding]:
    """Token selections whose attention capture is gone. A note: a selection holds what it transfers, so its runs'
    results stand; only the attention rows (the report's attention by layer) are lost."""
    captured = _ids(scan, "attention", "capture_id")
    selections = read_columns(scan.readable("selections"), ["capture_id"]).column("capture_id").to_pylist()
    lost = sorted({c for c in selections if c} - captured)
    return [Finding("references", f"{len(lost)} attention captures that token selections name are not in the store "
                                  f"(e.g. {lost[0]}): the selections and their runs stand, the attention rows are "
                                  "lost", problem=False)] if lost else []


def dangling_scores(scan: StoreScan) -> list[Finding]:
    """Scores of completed runs for samples their routes do not hold."""
    found = []
    for run, routes in _complete_routes(scan).items():
        routed = set(read_columns([routes], ["sample_id"]).column("sample_id").to_pylist())
        for path in (p for p in scan.readable("scores") if p.parent.name == run):
            lost = sorted(set(read_columns([path], ["sample_id"]).column("sample_id").to_pylist()) - routed)
            if lost:
                found.append(Finding("references", f"{path}: {len(lost)} scores name samples run {run}'s routes do "
                                                   f"not hold (e.g. {lost[0]})"))
    return found


def _complete_routes(scan: StoreScan) -> dict[str, Path]:
    """run id -> its routes file, for the completed runs whose routes are readable."""
    readable = set(scan.readable("routes"))
    return {run: path for run in scan.complete_runs if (path := scan.home.routes / run / "routes.parquet") in readable}


def _ids(scan: StoreScan, name: TableName, column: str) -> set[str]:
    return {str(v) for v in read_columns(scan.readable(name), [column]).column(column).to_pylist() if v}


def leftover_temp_files(scan: StoreScan) -> list[Finding]:
    """Temp files (`.tmp-*`: batch files, manifests, the catalog, partition links) anywhere under the store root
    that no live writer can still own: older than TEMP_AGE_S (a writer renames its temp file within seconds)."""
    now, found = time.time(), set()
    for path in scan.home.root.rglob(".tmp-*") if scan.home.root.is_dir() else ():
        try:
            status = path.lstat()
        except FileNotFoundError:  # renamed into place meanwhile
            continue
        if (stat.S_ISREG(status.st_mode) or stat.S_ISLNK(status.st_mode)) and now - status.st_mtime > TEMP_AGE_S:
            found.add(path)
    return [Finding("temp", f"{path}: a temp file its writer left (killed mid-write, or the disk was full); `mai "
                            "store verify --repair` removes it", remedy="remove-temp", targets=(path,))
            for path in sorted(found)]


def catalog_file(scan: StoreScan) -> list[Finding]:
    """The catalog file must be a DuckDB database (its header names it at bytes 8-12): anything else there (a
    report written over it) breaks every notebook that opens it. A missing one is rebuilt by the next run."""
    catalog = scan.home.catalog
    if not catalog.exists():
        return []
    try:
        with catalog.open("rb") as handle:
            header = handle.read(12)
        size = catalog.stat().st_size
        problem = "not a DuckDB database" if header[8:12] != b"DUCK" else \
            f"truncated ({size} bytes)" if size < DUCKDB_HEADERS_BYTES else ""
    except OSError as error:
        problem = f"unreadable ({error.strerror or error})"
    return [Finding("catalog", f"{catalog}: {problem}; `mai catalog` rebuilds it", remedy="rebuild-catalog")
            ] if problem else []


# a DuckDB database file starts with its main header and two database headers of 4 KiB each
DUCKDB_HEADERS_BYTES = 3 * 4096


def live_claims(scan: StoreScan) -> list[Finding]:
    claims = scan.home.claims
    stale = list(claims.glob("*/*.claim")) if claims.exists() else []
    return [Finding("claims", f"{len(stale)} claim files (live runs, or dead ones that the next claim clears)",
                    problem=False)] if stale else []


def runs_on_another_split(scan: StoreScan) -> list[Finding]:
    """Runs whose samples are another split's than the one they recorded (storage/split_check.py): a store written
    before the split was part of the data fingerprint. Nothing to move: the run's configuration, run again, reads its
    own split."""
    try:
        mismatches = runs_reading_another_split(scan.home)
    except ConfigError as error:  # the views could not be read: the checks above say why
        return [Finding("split", f"the runs' splits were not checked: {error}", problem=False)]
    return [Finding("split", mismatch.problem()) for mismatch in mismatches]


CHECKS: tuple[Check, ...] = (unreadable_files, schema_mismatches, folders_replaced, incomplete_shard_sets,
                             damaged_images, duplicate_identities, unpublished_versions, damaged_manifests,
                             runs_without_manifest, dangling_routes, dangling_selections, dangling_scores,
                             runs_on_another_split, leftover_temp_files, catalog_file, live_claims)


class VerificationRecord(TypedDict):
    """A store's verification (`mai store verify`, `--json`): a problem makes the command exit non-zero. With
    `--repair`: what it moved into quarantine or removed, and what the next run computes again."""

    problems: list[str]
    notes: list[str]
    checked_files: int
    repaired: list[str]
    next_run: list[str]


def verify_store(home: Home, repair: bool = False) -> VerificationRecord:
    """Runs every check of CHECKS; with `repair`, applies the remedies, rebuilds the catalog and checks again."""
    scan = scan_store(home)
    findings = [finding for check in CHECKS for finding in check(scan)]
    repaired: list[str] = []
    next_run: list[str] = []
    if repair:  # what the next run computes again is said once, and is no longer a problem
        repaired = apply_remedies(home, findings)
        next_run = [f.next_run for f in findings if f.remedy == "quarantine" and f.next_run]
        scan = scan_store(home)
        findings = [finding for check in CHECKS for finding in check(scan)]
        next_run = list(dict.fromkeys(next_run + [f.next_run for f in findings if f.next_run]))
        findings = [f for f in findings if not f.next_run]
    return {"problems": [f.message for f in findings if f.problem],
            "notes": [f.message for f in findings if not f.problem],
            "checked_files": sum(len(files) for files in scan.listed.values()), "repaired": repaired,
            "next_run": next_run}


def apply_remedies(home: Home, findings: Iterable[Finding]) -> list[str]:
    """Moves what is to be quarantined, removes leftover temp files, then rebuilds the catalog (its views then name
    only the files left). One line per thing done."""
    done: list[str] = []
    quarantine = home.store / QUARANTINE / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for finding in findings:
        for target in finding.targets:
            if finding.remedy == "quarantine" and (target.exists() or target.is_symlink()):
                moved = quarantine / _inside_store(home, target)
                moved.parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, moved)
                done.append(f"moved {target} to {moved}")
            elif finding.remedy == "remove-temp":
                target.unlink(missing_ok=True)
                done.append(f"removed {target}")
    build_catalog(home)
    done.append(f"rebuilt the catalog {home.catalog}")
    return done


def _inside_store(home: Home, path: Path) -> Path:
    """Where a moved file goes under the quarantine folder: its path inside the store (or the root)."""
    for base in (home.store, home.store.resolve(), home.root, home.root.resolve()):
        try:
            return path.relative_to(base)
        except ValueError:
            continue
    return Path(path.name)
