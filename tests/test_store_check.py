"""`mai store check` tests on the mounted store what the store needs from its filesystem, and a run refuses a store
whose locks do not work (#32). A filesystem without lock support is simulated for real in the processes under
test: a `sitecustomize.py` on their PYTHONPATH makes `fcntl.flock` grant every lock, as such a filesystem does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mai.storage import filesystem_check
from mai.storage.filesystem_check import Mount, host_local_locks, lock_problem, mount_of, rename_problem

from mai.errors import ConfigError

CHECKS = ["locks across processes", "locks shared between hosts", "atomic rename", "symlinks", "fsync", "free space"]

# every flock "succeeds" at once; at exit, whether this process ever imported torch (no model loads without it)
NO_LOCKS = """
import atexit, fcntl, json, os, sys
fcntl.flock = lambda fd, operation: None
report = os.environ.get("MAI_TEST_IMPORTS")
if report:
    atexit.register(lambda: open(report, "a").write(json.dumps({"torch": "torch" in sys.modules}) + "\\n"))
"""


def mai(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mai.flows.cli", *args], check=False, capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.fixture
def no_locks(tmp_path: Path) -> dict[str, str]:
    """The environment of a process on a filesystem whose locks grant everyone."""
    site = tmp_path / "no-locks"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_LOCKS)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_a_local_store_passes_every_check(tmp_path: Path) -> None:
    result = mai("store", "check", "--home", str(tmp_path / "store"))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[1:7]] == [f"PASS  {name}" for name in CHECKS]
    assert lines[-1] == "store check passed: runs and workers can share this store"
    assert not [p for p in (tmp_path / "store").rglob("*") if p.name.startswith(".tmp-")]  # the probes cleaned up


def test_the_global_home_option_names_the_store_too(tmp_path: Path) -> None:
    result = mai("--home", str(tmp_path / "other"), "store", "check", "--min-free-gb", "1000000")
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f"store {tmp_path / 'other'}"
    assert "FAIL  free space:" in result.stdout and "under 1e+06 GiB" in result.stdout
    assert result.stderr.strip().startswith("store check failed: free space: free some space")


def test_a_store_whose_locks_do_not_exclude_fails_the_check(tmp_path: Path, no_locks: dict[str, str]) -> None:
    result = mai("store", "check", "--home", str(tmp_path / "store"), env=no_locks)
    assert result.returncode == 1
    assert ("FAIL  locks across processes: a second process took the exclusive lock another process held"
            in result.stdout)
    assert "PASS  atomic rename" in result.stdout  # only what is broken fails
    summary = result.stderr.strip().splitlines()
    assert len(summary) == 1 and summary[0].startswith("store check failed: locks across processes: mount the store")


def test_a_run_on_a_store_without_working_locks_is_refused_before_any_model_loads(
        home: Path, tmp_path: Path, no_locks: dict[str, str]) -> None:
    imports = tmp_path / "imports.jsonl"
    result = mai("--home", str(home), "run", "--limit", "2", env={**no_locks, "MAI_TEST_IMPORTS": str(imports)})
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the store's filesystem at ") and "has no working file locks" in last
    assert "runs refuse it" in last
    assert [json.loads(line) for line in imports.read_text().splitlines()] == [{"torch": False}]
    assert not list((home / "store").glob("generations/**/*.parquet"))


# a holder whose lock outlives it: a forked process keeps the locked open file (as a lost NFS host keeps its lock
# until its lease expires), writes its pid beside the file, and lets go of the probe's pipes
LINGERING_HOLDER = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "r+b")
fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
if os.fork() == 0:
    os.closerange(0, 3)
    open(sys.argv[1] + ".pid", "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(0)
while not os.path.exists(sys.argv[1] + ".pid"):
    time.sleep(0.01)
print("locked", flush=True)
sys.stdin.read()
"""


def test_the_lock_probe_catches_a_lock_that_is_not_freed_when_its_holder_dies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filesystem_check, "_HOLDER", LINGERING_HOLDER)
    try:
        assert lock_problem(tmp_path, release_wait_s=0.5) == "the lock of a killed process was not freed within 0.5 s"
    finally:
        for pid_file in tmp_path.glob("*.pid"):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    monkeypatch.undo()
    assert lock_problem(tmp_path) is None  # the probe's own holder: freed at its death


def test_runs_refuse_a_store_whose_mount_keeps_locks_on_one_host(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    nfs = Mount("/shared", "nfs4", frozenset({"rw", "vers=4.2", "local_lock=flock"}))
    assert host_local_locks(nfs) == "nfs4 mount /shared has local_lock=flock: its locks stay on this host"
    assert host_local_locks(Mount("/shared", "nfs4", frozenset({"rw", "local_lock=none"}))) is None
    assert host_local_locks(Mount("/lustre", "lustre", frozenset({"localflock"}))) is not None
    assert mount_of(tmp_path) is not None and tmp_path.resolve().as_posix().startswith(mount_of(tmp_path).point)

    monkeypatch.setattr(filesystem_check, "mount_of", lambda path: nfs)
    monkeypatch.setattr(filesystem_check, "_PROBED", {})
    with pytest.raises(ConfigError, match=r"no working file locks \(nfs4 mount /shared has local_lock=flock"):
        filesystem_check.require_working_locks(tmp_path / "claims")


def test_a_partial_file_seen_by_a_reader_fails_the_rename_check(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem whose rename copies the file into place (an object-store mount) shows readers part of it."""
    def copy_into_place(source: str | Path, target: str | Path) -> None:
        data = Path(source).read_bytes()
        Path(source).unlink()
        with open(target, "wb") as handle:
            for start in range(0, len(data), 4096):
                handle.write(data[start:start + 4096])
                handle.flush()

    assert rename_problem(tmp_path) is None
    monkeypatch.setattr(filesystem_check.os, "replace", copy_into_place)
    problem = rename_problem(tmp_path, versions=400)
    assert problem is not None and problem.startswith("a reading process saw ")


# flock as NFS gives it: emulated with POSIX locks, which belong to a process and are dropped by closing any of its
# descriptors of the file
PER_PROCESS_LOCKS = """
import fcntl
fcntl.flock = fcntl.lockf
"""

THREADS_CLAIM = """
import json, subprocess, sys, threading
from pathlib import Path
from mai.storage.claims import ClaimBoard
from mai.storage.paths import Home

board = ClaimBoard(Home.at(sys.argv[1]), "generations/m/R")
first = board.claim(["a", "b"], lambda ids: set())
seen = {}

def second() -> None:
    with board.claim(["a", "b", "c"], lambda ids: set()) as claim:
        seen["mine"], seen["theirs"] = claim.mine, sorted(set().union(*claim.theirs.values()))

thread = threading.Thread(target=second)
thread.start()
thread.join()
probe = "import sys; from pathlib import Path; from mai.storage.claims import _is_dead; print(_is_dead(Path(sys.argv[1])))"
seen["first_dead_to_another_process"] = subprocess.run([sys.executable, "-c", probe, str(first.path)],
                                                       capture_output=True, text=True).stdout.strip()
first.release()
print(json.dumps(seen))
"""


def test_threads_stay_separate_claimants_where_locks_belong_to_the_process(tmp_path: Path) -> None:
    """On NFS a second thread's probe of a live claim of its own process would be granted the lock, take the claim
    for dead and, closing its descriptor, drop the first thread's lock: the same ids computed twice."""
    site = tmp_path / "per-process-locks"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PER_PROCESS_LOCKS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, "-c", THREADS_CLAIM, str(tmp_path / "store")], check=False,
                           capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout) == {"mine": ["c"], "theirs": ["a", "b"], "first_dead_to_another_process": "False"}
    checked = mai("store", "check", "--home", str(tmp_path / "store"), env=env)  # per-process locks serve the store
    assert checked.returncode == 0, checked.stdout + checked.stderr
