"""Per-run results: route rows, metrics and the manifest (written last: its existence means the run
completed). Each run writes into its own directory, so runs never touch each other's files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from mai.files import write_atomically
from mai.manifest import RunManifest, ShardOutcome
from mai.storage.damage import DamagedFileError, Unreadable
from mai.storage.parquet import read_rows, write_rows
from mai.storage.paths import Home


def write_routes(home: Home, run_id: str, rows: Sequence[Mapping[str, object]]) -> Path:
    return write_rows(home.routes / run_id / "routes.parquet", rows, "routes")


def write_metrics(home: Home, run_id: str, profile: str, rows: Sequence[Mapping[str, object]]) -> Path:
    """One file per scorer profile: re-scoring a run adds a file, never rewrites one."""
    return write_rows(home.table_dir("metrics") / run_id / f"{profile}.parquet", rows, "metrics")


def write_scores(home: Home, run_id: str, profile: str, rows: Sequence[Mapping[str, object]]) -> Path:
    return write_rows(home.table_dir("scores") / run_id / f"{profile}.parquet", rows, "scores")


def write_manifest(home: Home, run_id: str, manifest: RunManifest, row: Mapping[str, object]) -> Path:
    """The human-readable JSON first (atomic: a run killed meanwhile leaves no half manifest), the catalog row last."""
    directory = home.runs / run_id
    write_atomically(directory / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return write_rows(directory / "run.parquet", [row], "runs")


def is_complete(home: Home, run_id: str) -> bool:
    """The one answer to "did run X complete": its catalog row exists (written after everything else)."""
    return bool(run_id) and "/" not in run_id and (home.runs / run_id / "run.parquet").exists()


def shard_outcome_path(home: Home, run_id: str, shard_path: str) -> Path:
    return home.runs / run_id / "shards" / (Path(shard_path).stem + ".json")


def shard_lease_path(home: Home, run_id: str, shard_path: str) -> Path:
    return home.runs / run_id / "shards" / (Path(shard_path).stem + ".lease")


def write_shard_outcome(home: Home, run_id: str, shard_path: str, outcome: ShardOutcome) -> Path:
    """What a shard flow hands its parent (stage maps, its own accounting): a file in the shared store, so a
    shard that ran on another worker reports the same way as one that ran in the parent's process. Atomic."""
    return write_atomically(shard_outcome_path(home, run_id, shard_path), outcome.model_dump_json())


_STORED_SHARDS = TypeAdapter(dict[str, ShardOutcome])


def write_stored_shards(home: Home, run_id: str, stored: dict[str, ShardOutcome]) -> Path:
    """The shards that the command resolving the run found answered whole by the store, with their outcomes: read
    by the flow that completes the run instead of resolving again (mai/pipeline.py `hand_over`). Atomic."""
    return write_atomically(home.runs / run_id / "stored-shards.json", _STORED_SHARDS.dump_json(stored))


def read_stored_shards(home: Home, run_id: str) -> dict[str, ShardOutcome]:
    return _STORED_SHARDS.validate_json((home.runs / run_id / "stored-shards.json").read_bytes())


def write_regression_report(home: Home, run_id: str, report: str) -> Path:
    path = home.runs / run_id / "regression.md"
    path.write_text(report + "\n")
    return path


def read_shard_outcomes(home: Home, run_id: str) -> list[ShardOutcome]:
    """Every shard outcome of a run (for reports and benchmarks: where each shard ran and how long it took)."""
    return [ShardOutcome.model_validate_json(p.read_text())
            for p in sorted((home.runs / run_id / "shards").glob("*.json"))]


def read_shard_outcome(home: Home, run_id: str, shard_path: str) -> ShardOutcome | None:
    path = shard_outcome_path(home, run_id, shard_path)
    return ShardOutcome.model_validate_json(path.read_text()) if path.exists() else None


def read_routes(home: Home, run_id: str) -> list[dict[str, Any]]:
    return read_rows([home.routes / run_id / "routes.parquet"])


# what a damaged manifest costs, and what brings the run back (verify's repair moves it aside with the runs row)
MANIFEST_HINT = ("run `mai store verify --repair` (it moves the run aside), then run its configuration again (its "
                 "stored outputs are reused)")


def manifest_damage(path: Path) -> str | None:
    """Why `path` is not a run manifest mai can read (None: it reads): missing, not UTF-8, not JSON, not an object
    with the run's configuration and shards. Used by `read_manifest` and by `mai store verify`."""
    return _loaded_manifest(path)[1]


def _loaded_manifest(path: Path) -> tuple[RunManifest | None, str | None]:
    try:
        loaded = json.loads(path.read_bytes().decode())
    except FileNotFoundError:
        return None, "missing"
    except UnicodeDecodeError:
        return None, "not UTF-8 text: overwritten or damaged"
    except ValueError as error:
        return None, f"not JSON ({error}): truncated, overwritten or damaged"
    except OSError as error:
        return None, error.strerror or str(error)
    if not isinstance(loaded, dict) or not {"config", "shard_paths"} <= loaded.keys():
        return None, "not a run manifest (a JSON value without the run's config and shard_paths)"
    manifest: RunManifest = loaded  # type: ignore[assignment]  # the manifest's keys, as write_manifest wrote them
    return manifest, None


def read_manifest(home: Home, run_id: str) -> RunManifest:
    """The run's manifest; a damaged or missing one stops the command with one line naming it and what to run."""
    path = home.runs / run_id / "manifest.json"
    manifest, reason = _loaded_manifest(path)
    if manifest is None:
        raise DamagedFileError(Unreadable(path, reason or "missing", MANIFEST_HINT))
    return manifest
