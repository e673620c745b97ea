"""A read-only store, for real. Root ignores permission bits, so `chmod -w` simulates nothing for the tests (they run
as root on CI): each command here runs in a child's own mount namespace (`unshare -m`) where the store, or one
folder of it, is bind-mounted read-only, so every write gets EROFS from the kernel as on a read-only disk. `mai run`,
`mai store compact`, `mai report --out` and `mai catalog` then fail with one line saying what to do and a non-zero
exit, no traceback; nothing stored changes, no temp file is left, and a run that failed half-way completes when run
again on the writable store, from what it stored. Real runs, real Prefect (the session's test server), real DuckDB."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mai.cli import main
from mai.storage.paths import Home
from tests.helpers import seeded_store

pytestmark = [pytest.mark.prefect, pytest.mark.cluster]

RUN = ["run", "--max-new-tokens", "S=6", "--max-new-tokens", "R=12", "--max-new-tokens", "RT=6",
       "--max-new-tokens", "S2=6"]
MAI = str(Path(sys.executable).with_name("mai"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, prefect_server: str, assets_home: Path) -> Home:
    root = tmp_path_factory.mktemp("readonly") / "home"
    seeded_store(root, assets_home)
    assert main(["--home", str(root), *RUN, "--limit", "4"]) == 0
    return Home.at(root)


def test_the_kernel_refuses_writes_under_a_read_only_bind_mount(tmp_path: Path) -> None:
    """The simulation itself: without it every test below would pass vacuously. No silent skip: a machine without
    `unshare`/`mount` (or without the right to use them) fails here."""
    (tmp_path / "src").mkdir()
    (tmp_path / "ro").mkdir()
    done = in_read_only_mount(tmp_path / "src", tmp_path / "ro", "touch", str(tmp_path / "ro" / "x"))
    assert done.returncode != 0 and "Read-only file system" in done.stderr, done.stderr
    assert not (tmp_path / "src" / "x").exists()


def test_commands_on_a_read_only_store_fail_in_one_line(store: Home, tmp_path: Path) -> None:
    before = snapshot(store.root)
    view = tmp_path / "ro"
    view.mkdir()
    for command in ([*RUN, "--limit", "6"], [*RUN, "--limit", "4"], ["store", "compact"], ["catalog"],
                    ["report", "--out", str(view / "report.html")]):
        done = in_read_only_mount(store.root, view, MAI, "--home", str(view), *command)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert one_line(done.stderr).startswith("error: Read-only file system"), (command, done.stderr)
        assert "point --home (or MAI_HOME) at a writable one" in done.stderr
    # reading is what a read-only store is for: a report of it, written outside it, works
    out = tmp_path / "report.html"
    done = in_read_only_mount(store.root, view, MAI, "--home", str(view), "report", "--out", str(out))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert out.stat().st_size > 0 and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert snapshot(store.root) == before  # nothing changed, nothing lost, no temp file left


def test_a_run_that_cannot_write_its_routes_fails_in_one_line_and_completes_when_run_again(store: Home) -> None:
    """The store read-only from the routes folder down: the run generates and stores its outputs, then fails
    writing its routes. Prefect's own failure logs (with the traceback) do not reach the terminal."""
    routes = store.root / "store" / "routes"
    before = snapshot(store.root)
    command = [*RUN, "--limit", "7"]
    done = in_read_only_mount(routes, routes, MAI, "--home", str(store.root), *command)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert one_line(done.stderr).startswith("error: Read-only file system"), done.stderr
    after = snapshot(store.root)
    assert {path: digest for path, digest in after.items() if path in before} == before  # nothing changed
    assert not [path for path in after if Path(path).name.startswith(".tmp")]
    again = subprocess.run([MAI, "--home", str(store.root), *command], capture_output=True, text=True, check=False,
                           timeout=300, env=child_env())
    assert again.returncode == 0, again.stderr
    assert "generations: 0 computed, 28 reused (of 28)" in again.stdout  # what the failed run stored is used


def in_read_only_mount(source: Path, view: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` in a child with its own mount namespace, where `view` shows `source` read-only (a bind mount, then
    its remount read-only: the second step is what makes it read-only). The mounts end with the child."""
    script = (f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(view))} && "
              f"mount -o remount,bind,ro {shlex.quote(str(view))} && exec {shlex.join(command)}")
    unshare = shutil.which("unshare")
    assert unshare is not None, "the read-only store tests need util-linux's unshare (and root, as on CI)"
    return subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=300, env=child_env())


def child_env() -> dict[str, str]:
    """The test session's Prefect server for the child commands (none starts a temporary server of its own)."""
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}


def one_line(stderr: str) -> str:
    """The command's only line on stderr; the test fails showing everything else the command printed."""
    lines = [line for line in stderr.splitlines() if line.strip() and "━" not in line]  # progress bars aside
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    """Every file (and link) of the store with its content's hash: what 'nothing changed or lost' compares."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path.relative_to(root))] = "-> " + os.readlink(path)
        elif path.is_file():
            found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found
