"""The specs of the store's spec benchmarks (mai/evals/spec.py), one JSON file per benchmark version under
`benchmarks/<name>/<version>.json`: what a spec said when a run used it, so that the commands reading the store
(report, compare, the policy lab, rescore) know the benchmark by its name in any process, without the spec file.
The runs' manifests hold the same spec in their configuration."""

from __future__ import annotations

from pydantic import ValidationError

from mai.evals.registry import register_spec
from mai.evals.spec import BenchmarkSpec
from mai.files import write_atomically
from mai.storage.paths import Home


def record_spec(home: Home, spec: BenchmarkSpec) -> None:
    """Write (or refresh) the spec's file; atomic (a reader sees the old file or the new one)."""
    write_atomically(home.benchmark_specs / spec.name / f"{spec.version}.json", spec.model_dump_json(indent=2))


def register_recorded_specs(home: Home) -> list[BenchmarkSpec]:
    """Make every recorded spec known by its name in this process (of one name's versions, the most recently used
    last, so it is the one the name means); unreadable files are skipped (the commands then say the benchmark is
    unknown)."""
    if not home.benchmark_specs.is_dir():
        return []
    files = sorted(home.benchmark_specs.glob("*/*.json"), key=lambda p: p.stat().st_mtime_ns)
    specs = []
    for file in files:
        try:
            spec = BenchmarkSpec.model_validate_json(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValidationError):
            continue
        register_spec(spec)
        specs.append(spec)
    return specs


def recorded_spec(home: Home, name: str) -> BenchmarkSpec | None:
    """The spec a name last meant in this store (its most recently used version), None when it has none."""
    files = sorted((home.benchmark_specs / name).glob("*.json"), key=lambda p: p.stat().st_mtime_ns) \
        if (home.benchmark_specs / name).is_dir() else []
    for file in reversed(files):
        try:
            return BenchmarkSpec.model_validate_json(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValidationError):
            continue
    return None
