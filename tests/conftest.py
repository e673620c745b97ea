"""Shared fixtures: a real (test-harness) Prefect server for the tests that need one (marker `prefect`, started once
per session on the first of them), the built-in tiny models and the demo dataset built once per session, and a
fresh store root per test that wants one. A module- or session-scoped fixture that runs flows requests `prefect_server` itself (it is set up before any
test's own fixtures).

A test without the `prefect` marker has no Prefect API: its URL, in this process and in the environment its
subprocesses inherit, is one where nothing listens, so a flow run or a `mai` command that runs one fails instead of
starting a server. A test that needs Prefect and lacks the marker therefore fails, in every tier, with a note saying to add the marker (`pytest_runtest_makereport` below)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# a parallel worker (pytest-xdist, `make test`) computes on one thread: with two workers on two cores, torch's
# default (a thread per core) gave each worker two OpenMP threads that contended for the cores (the suite took 34-39
# CPU-minutes on two workers against 28 in one process; docs/benchmarks.md). Set before torch is imported, in this
# process and in the environment the tests' subprocesses inherit; a value the user set is kept. A run in one process
# keeps torch's default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")

# a suite started in the background of a non-interactive shell (`nohup make test &`) inherits SIGINT ignored, and so
# would every command a test starts: the Ctrl-C tests (`mai sql`, a fanned-out run) then hang or run to the end.
# They model a terminal, where Ctrl-C reaches the command: Python's own handler, as in a foreground session
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from tests.helpers import (  # after the thread settings: it may come to import torch
    link_shapes,
    seeded_store,
    shared_by_workers,
)

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# the Prefect API of every test without the `prefect` marker, in this process and in its subprocesses: port 9
# (discard), where nothing listens. A URL rather than none: without one, Prefect's client starts a temporary server
# of its own. Set before Prefect is imported, so that whatever imports it reads this URL.
NO_PREFECT_API = "http://127.0.0.1:9/api"
# the user's own API, if any; NO_PREFECT_API is none: a parallel worker (pytest-xdist) inherits the environment of
# its controller, in which this module already set it (the tests' `mai` subprocesses then found no API at all)
USER_PREFECT_API = os.environ.get("PREFECT_API_URL") if os.environ.get("PREFECT_API_URL") != NO_PREFECT_API else None
os.environ["PREFECT_API_URL"] = NO_PREFECT_API
# the tests' own PREFECT_HOME, where the temporary servers of their `mai` commands keep a database per store
# (flows/prefect_api.py `server_directory`): one folder per session, made by the controller (its parallel workers
# inherit it) and removed at its end, so the suite writes nothing into the user's ~/.prefect
MADE_PREFECT_HOME = "MAI_TESTS_PREFECT_HOME" not in os.environ
if MADE_PREFECT_HOME:
    os.environ["MAI_TESTS_PREFECT_HOME"] = tempfile.mkdtemp(prefix="mai-tests-prefect-home-")
os.environ["PREFECT_HOME"] = os.environ["MAI_TESTS_PREFECT_HOME"]


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prefect's test server (its own SQLite database), started by the first test that needs it and stopped at the
    session's end; yields its API URL. Use it through the `prefect` marker."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_RESULTS_LOCAL_STORAGE_PATH,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    results = tmp_path_factory.mktemp("prefect-results")
    # no flow run heartbeats: nothing here watches them, and each flow run's end waits up to 1 s for its heartbeat
    # thread (flows/fanout.py)
    settings = {PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(results), PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    # a wait for the server to answer, with a limit a loaded machine meets (at load 20-30 on the 2-core machine the
    # server took more than 90 s to start, #51)
    with temporary_settings(settings), prefect_test_harness(server_startup_timeout=600):
        yield str(PREFECT_API_URL.value())


@pytest.fixture(autouse=True)
def prefect_api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The session's Prefect server for a test marked `prefect` (its subprocesses get the environment the session
    started with); no Prefect API at all for any other test."""
    if request.node.get_closest_marker("prefect") is not None:
        request.getfixturevalue("prefect_server")
        if USER_PREFECT_API is None:
            monkeypatch.delenv("PREFECT_API_URL")
        else:
            monkeypatch.setenv("PREFECT_API_URL", USER_PREFECT_API)
        yield
        return
    if "prefect.settings" not in sys.modules:  # imported later, Prefect reads NO_PREFECT_API from the environment
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: NO_PREFECT_API}):  # over the test server's, once it runs
        yield


def pytest_unconfigure(config: pytest.Config) -> None:
    if MADE_PREFECT_HOME:  # the process that made it: every test (and every parallel worker) has ended
        shutil.rmtree(os.environ["MAI_TESTS_PREFECT_HOME"], ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    if (report.failed and item.get_closest_marker("prefect") is None
            and NO_PREFECT_API.removesuffix("/api") in report.longreprtext):
        hint = ("this test reached for a Prefect API but has none: mark it `@pytest.mark.prefect` "
                "(tests/conftest.py, docs/development.md)")
        report.sections.append(("prefect marker", hint))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files holding a `slow` test run first, each file's tests kept together and in order. `make test` runs
    the files on two workers (pytest-xdist, `--dist loadfile`: a file's module fixtures are built once, on one
    worker); a long file handed out last would leave the other worker idle at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the collection order otherwise


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """What a test records with `record_property("measured", text)`, kept for the end of the session's log: a
    parallel worker's own output never reaches the terminal, its reports (and their properties) do."""
    if report.when == "call":
        MEASURED.extend(str(value) for name, value in report.user_properties if name == "measured")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MEASURED:
        terminalreporter.section("measured")
        for text in MEASURED:
            terminalreporter.write_line(text)


MEASURED: list[str] = []


@pytest.fixture(scope="session")
def assets_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store root holding only the built models and the demo dataset (copied into per-test roots), built by the
    session's first xdist worker (the others find them built)."""
    from mai.run.assets import build_demo_dataset, build_models
    from mai.storage.paths import Home

    with shared_by_workers(tmp_path_factory, "assets") as directory:
        home = Home.at(directory)
        build_models(home)
        build_demo_dataset(home)
    return home.root


@pytest.fixture(scope="session")
def shapes_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `shapes` benchmark's splits (about 200 MB, half a minute of CPU), built once per session, its xdist
    workers together, for the tests that use it (`@pytest.mark.usefixtures("shapes_dataset")` puts them into
    `home`; `link_shapes` elsewhere). The first worker builds them; the others find them built (`world.json`)."""
    from mai.run.assets import build_shapes_dataset
    from mai.storage.paths import Home

    with shared_by_workers(tmp_path_factory, "shapes") as directory:
        return build_shapes_dataset(Home.at(directory))


@pytest.fixture
def home(request: pytest.FixtureRequest, tmp_path: Path, assets_home: Path) -> Path:
    """A fresh store root with the built-in models and demo data already in place (and the shapes splits, for a
    test that uses the `shapes_dataset` fixture)."""
    root = tmp_path / "home"
    seeded_store(root, assets_home)
    if "shapes_dataset" in request.fixturenames:
        link_shapes(request.getfixturevalue("shapes_dataset"), root)
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


@pytest.fixture
def no_process_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test when a process it started is still alive after it (given tests/leaks.py's grace to end), and
    kills it. The cluster and fan-out tests use it (their modules' `pytestmark`)."""
    from tests.leaks import MARK, kill, left_behind

    mark = f"{os.getpid()}-{request.node.nodeid}"
    os.environ[MARK] = mark
    try:
        yield
    finally:
        del os.environ[MARK]
    left = left_behind(mark)
    kill(list(left))
    if left:
        pytest.fail(f"the test left {len(left)} processes alive (killed now): "
                    + "; ".join(f"{pid}: {command[:200]}" for pid, command in sorted(left.items())))
