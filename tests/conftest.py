"""Shared fixtures: one real (test-harness) Prefect server per session, the built-in tiny models and the demo
dataset built once per session, and a fresh store root per test that wants one."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from prefect.settings import (
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_RESULTS_LOCAL_STORAGE_PATH,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    results = tmp_path_factory.mktemp("prefect-results")
    # no flow run heartbeats: nothing here watches them, and each flow run's end waits up to 1 s for its heartbeat
    # thread (flows/fanout.py)
    settings = {PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(results), PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    with temporary_settings(settings), prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def assets_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store root holding only the built models and the demo dataset (copied into per-test roots)."""
    from mai.flows.assets import build_demo_dataset, build_models
    from mai.storage.paths import Home

    home = Home.at(tmp_path_factory.mktemp("assets"))
    build_models(home)
    build_demo_dataset(home)
    return home.root


@pytest.fixture
def home(tmp_path: Path, assets_home: Path) -> Path:
    """A fresh store root with the built-in models and demo data already in place."""
    root = tmp_path / "home"
    shutil.copytree(assets_home / "models", root / "models")
    shutil.copytree(assets_home / "datasets", root / "datasets")
    return root


@pytest.fixture(autouse=True)
def cold_engines() -> Iterator[None]:
    """Each test starts with no loaded engine, so engine counters count only that test's work."""
    from mai.backends.registry import clear_engines

    clear_engines()
    yield
    clear_engines()


@pytest.fixture(scope="session")
def training_script() -> Iterator[Any]:
    """Imports a script of `training/` by module name (they import each other, so the folder goes on the path
    for the session and comes off after)."""
    import importlib
    import sys

    folder = str(Path(__file__).resolve().parents[1] / "training")
    sys.path.insert(0, folder)
    yield importlib.import_module
    sys.path.remove(folder)
