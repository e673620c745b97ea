"""`mai store check` tests on the mounted store what the store needs from its filesystem and says what one host
cannot prove (#39), and a run refuses a store that fails a check it depends on: locks (#32), rename, symlinks (#39). A filesystem without lock support is simulated for real in the processes under
test: a `sitecustomize.py` on their PYTHONPATH makes `fcntl.flock` grant every lock, as such a filesystem does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mai.errors import ConfigError
from mai.storage import filesystem_check
from mai.storage.filesystem_check import (
    Mount,
    check_store,
    filesystem_kind,
    host_local_locks,
    lock_problem,
    mount_of,
    rename_problem,
)

CHECKS = ["locks across processes", "lock mount options", "atomic rename", "symlinks", "fsync", "free space"]

# every flock "succeeds" at once (in the process and in those it starts)
NO_LOCKS = """
import fcntl
fcntl.flock = lambda fd, operation: None
"""


def mai(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mai.cli", *args], check=False, capture_output=True,
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
    # a local disk is not called shared between hosts: what one host cannot prove is said, not passed
    assert "is a local filesystem" in lines[2] and "no other host reaches it" in lines[2]
    assert lines[7].startswith("NOT PROVEN  locks between hosts: that a lock taken on another host excludes")
    assert "only a probe run on every host sharing the store" in lines[7]
    # and the verdict claims only that: this host's processes, with the locks between hosts not proven
    assert lines[-1].startswith("store check passed for the processes of this host; locks between hosts are NOT "
                                "PROVEN: run `mai store check --pool POOL`"), lines[-1]
    assert "can share this store" not in result.stdout
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
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The command in this process, whose every flock "succeeds" at once (as on a filesystem whose locks grant
    everyone; the probe's holder, a process of its own, locks for real): refused, and no model loaded. What it
    answers, not how a process starts, is the subject (`mai store check` above runs as a process of its own)."""
    import fcntl

    from mai.backends.registry import loaded_engines
    from mai.cli import main

    monkeypatch.setattr(filesystem_check, "_PROBED", {})  # this process's verdicts so far: probe again
    monkeypatch.setattr(fcntl, "flock", lambda fd, operation: None)
    code = main(["--home", str(home), "run", "--limit", "2"])
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: the store's filesystem at ") and "fails the locks across processes check" in last
    assert "runs refuse it. To fix: mount the store with working file locks" in last
    assert loaded_engines() == []
    assert not list((home / "store").glob("generations/**/*.parquet"))


def test_a_run_on_a_store_whose_symlinks_fail_is_refused_before_it_writes(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Not only the lock check: a run refuses a store that fails any check a run depends on (#39). The command in
    this process, on a filesystem whose symbolic links are refused (as on some SMB and object-store mounts): what it
    answers, not how a process starts, is the subject (as the lock check's refusal above)."""
    import errno

    from mai.cli import main

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", args[1] if len(args) > 1 else None)

    monkeypatch.setattr(filesystem_check, "_PROBED", {})  # this process's verdicts so far: probe again
    monkeypatch.setattr(os, "symlink", refuse)
    code = main(["--home", str(home), "run", "--limit", "2"])
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: the store's filesystem at ") and "fails the symlinks check" in last
    assert "Operation not permitted" in last and "To fix: use a filesystem with symbolic links" in last
    assert not list((home / "store").glob("generations/**/*.parquet"))


def test_a_store_whose_rename_does_not_replace_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem whose rename will not replace an existing file fails the rename check, and runs refuse it."""
    real_replace = os.replace

    def refuse_existing(source: str | Path, target: str | Path) -> None:
        if Path(target).exists():
            raise FileExistsError(17, "File exists", str(target))
        real_replace(source, target)

    monkeypatch.setattr(filesystem_check, "_PROBED", {})
    monkeypatch.setattr(filesystem_check.os, "replace", refuse_existing)
    with pytest.raises(ConfigError, match=r"fails the atomic rename check \(File exists: .*To fix: use a filesystem"):
        filesystem_check.require_working_store(tmp_path / "locks")


def test_a_full_disk_at_the_first_write_is_named_as_the_full_disk(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose disk is full fails the first probe that writes (the lock probe): the refusal names the full
    disk and how to free it, not a lock problem with a remount fix."""
    import errno

    def full(self: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(filesystem_check, "_PROBED", {})
    monkeypatch.setattr(filesystem_check, "host_local_locks", lambda mount: None)
    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(ConfigError) as refused:
        filesystem_check.require_working_store(tmp_path / "locks")
    message = str(refused.value)
    assert "the store's disk is full (No space left on device" in message
    assert "To fix: free some space on the store's disk" in message and "remount" not in message


def test_what_the_mount_shows_is_said_and_what_it_cannot_is_not_proven(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """tmpfs, a FUSE mount and NFS each get a line that says what kind of filesystem it is; none is called shared
    between hosts, and every report says that locks between hosts are not proven by one host."""
    mounts = {"tmpfs": Mount("/dev/shm", "tmpfs", frozenset({"rw"})),
              "fuse": Mount("/mnt/b", "fuse.bindfs", frozenset({"rw"})),
              "nfs": Mount("/mnt/s", "nfs4", frozenset({"rw", "local_lock=none"}))}
    assert [filesystem_kind(m) for m in mounts.values()] == ["local", "fuse", "network"]
    assert filesystem_kind(None) == "unknown"
    seen = {}
    for name, mount in mounts.items():
        monkeypatch.setattr(filesystem_check, "mount_of", lambda path, mount=mount: mount)
        report = check_store(tmp_path / name, min_free_gib=0)
        assert not report.failed
        seen[name] = (report.checks[1].meaning, report.unproven)
    assert seen["tmpfs"][0].startswith("tmpfs at /dev/shm is a local filesystem")
    assert seen["fuse"][0].startswith("fuse.bindfs at /mnt/b is a FUSE filesystem: its daemon decides")
    assert seen["nfs"][0].startswith("nfs4 at /mnt/s is a network filesystem with no mount option")
    for meaning, unproven in seen.values():
        assert "shared between hosts" not in meaning
        assert len(unproven) == 1 and unproven[0].startswith("locks between hosts: ")
    assert "assume they do not until shown" in seen["fuse"][1][0]
    assert "serves this host only" in seen["tmpfs"][1][0]


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
    with pytest.raises(ConfigError, match=r"fails the locks across processes check \(nfs4 mount /shared has local_lock"):
        filesystem_check.require_working_store(tmp_path / "claims")


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


# one participant of the cross-host lock probe, in a process of its own: prints the hosts whose lock it took
PROBE_PARTICIPANT = """
import sys
from pathlib import Path
from mai.storage.filesystem_check import cross_host_lock_probe
print(",".join(cross_host_lock_probe(Path(sys.argv[1]), sys.argv[2], 2, timeout_s=60).took))
"""


def probe_two_hosts(first: Path, second: Path, probe: str) -> dict[str, str]:
    """Host `h1` probes through `first`, `h2` through `second` (two mounts of one directory, or one directory), at
    once: host -> the hosts whose lock it took."""
    runs = {host: subprocess.Popen([sys.executable, "-c", PROBE_PARTICIPANT, str(where / probe), host],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for host, where in (("h1", first), ("h2", second))}
    took = {}
    for host, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-2000:]
        took[host] = out.strip()
    return took


@pytest.mark.cluster
def test_the_cross_host_probe_fails_two_mounts_whose_locks_stay_on_each_and_passes_one_filesystem(
        tmp_path: Path) -> None:
    """The probe `mai store check --pool` runs on each host, here two processes: through one directory each is
    refused the other's lock; through two bindfs (FUSE) mounts of it, whose locks stay on each mount as a network
    filesystem's host-local locks stay on each host, each takes the other's. Needs root and bindfs (`make
    postgresql` installs it)."""
    from mai.storage.filesystem_check import cross_host_results, hosts_whose_locks_leak

    shared = tmp_path / "shared"
    shared.mkdir()
    assert probe_two_hosts(shared, shared, "one") == {"h1": "", "h2": ""}
    assert hosts_whose_locks_leak(cross_host_results(shared / "one")) == []
    mounts = [tmp_path / "on-h1", tmp_path / "on-h2"]
    mounted: list[Path] = []
    try:
        for mount in mounts:
            mount.mkdir()
            subprocess.run(["bindfs", str(shared), str(mount)], check=True, capture_output=True, timeout=60)
            mounted.append(mount)
        assert probe_two_hosts(mounts[0], mounts[1], "two") == {"h1": "h2", "h2": "h1"}
        assert sorted(hosts_whose_locks_leak(cross_host_results(shared / "two"))) == [
            "h1 took the lock h2 held", "h2 took the lock h1 held"]
    finally:
        for mount in mounted:
            subprocess.run(["fusermount", "-u", str(mount)], check=False, capture_output=True, timeout=60)


def test_a_lock_probe_whose_hosts_run_on_one_kernel_proves_nothing_between_machines(tmp_path: Path) -> None:
    """Two participants of the cross-host probe on this machine (two threads, as two simulated hosts sharing a
    kernel): neither takes the other's lock, which is what one kernel's locks always do, so the probe cannot say
    that the store's locks work between machines (`mai store check --pool` says NOT PROVEN); participants with boot
    ids of their own are separate machines."""
    from concurrent.futures import ThreadPoolExecutor

    from mai.storage.filesystem_check import (
        HostProbe,
        cross_host_lock_probe,
        cross_host_results,
        on_one_kernel,
    )

    probe = tmp_path / "probe"
    with ThreadPoolExecutor(2) as pool:
        ran = list(pool.map(lambda host: cross_host_lock_probe(probe, host, 2, timeout_s=60), ["mai-a", "mai-b"]))
    assert [p.took for p in ran] == [[], []]
    results = cross_host_results(probe)
    assert {p.kernel for p in results} == {Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    assert on_one_kernel(results)
    assert not on_one_kernel([HostProbe("mai-a", [], "1"), HostProbe("mai-b", [], "2")])
    assert not on_one_kernel([HostProbe("mai-a", [], ""), HostProbe("mai-b", [], "")])  # unknown: not claimed
