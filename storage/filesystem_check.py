"""What the store needs from its filesystem, tested on the mounted path (`mai store check`), and the probes every run
and shard passes before it works on a store (`require_working_store`).

The store needs exclusive file locks that exclude other processes and are freed when their holder dies (claims and
leases, storage/claims.py: without them outputs are computed twice and a dead worker's shards are never taken over),
on a shared filesystem locks that reach the server (NFS `local_lock=flock|all` or `nolock`, Lustre `localflock`
keep them on each host); a rename that replaces a file atomically (every file is written to a temp name, then
renamed over); symbolic links replaced by rename (compaction swaps each partition's link); fsync; free space.

One host cannot prove that a lock taken on another host excludes its processes: only a probe on every host sharing
the store, each trying the locks the others hold, can (`mai store check --pool`, `cross_host_lock_probe`). Each
report says so (`StoreReport.unproven`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from mai.errors import ConfigError

RELEASE_WAIT_S = 10.0  # how long a killed holder's lock may take to be freed (the kernel frees it at its exit)
MIN_FREE_GIB = 1.0
RENAME_VERSIONS = 40  # files renamed over one name while another process reads it

# the other process of the lock probe: takes the lock, says so, holds it until killed. It imports nothing of mai
# (~20 ms) and runs with this process's environment, so it sees the filesystem (and any fcntl) this process sees
_HOLDER = ("import fcntl, sys\n"
           "handle = open(sys.argv[1], 'r+b')\n"
           "fcntl.flock(handle.fileno(), fcntl.LOCK_EX)\n"
           "print('locked', flush=True)\n"
           "sys.stdin.read()\n")

# the other process of the rename check: reads the file until told to stop; prints the reads and the bad ones
_READER = ("import sys, select\n"
           "path, reads, bad = sys.argv[1], 0, []\n"
           "def read():\n"
           "    global reads\n"
           "    try:\n"
           "        data = open(path, 'rb').read()\n"
           "    except FileNotFoundError:\n"
           "        bad.append('missing'); return\n"
           "    head, _, rest = data.partition(b':')\n"
           "    reads += 1\n"
           "    if not head.isdigit() or len(rest) != int(head) or not rest.endswith(b'$'):\n"
           "        bad.append(f'{len(data)}B')\n"
           "read(); print('reading', flush=True)\n"
           "while not select.select([sys.stdin], [], [], 0)[0]:\n"
           "    read()\n"
           "read(); print(reads, len(bad), *bad[:3], flush=True)\n")


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    meaning: str   # what was found and what it means for the store
    fix: str = ""  # what to do when it failed


@dataclass(frozen=True)
class StoreReport:
    checks: list[Check]
    unproven: list[str]  # what a check on this one host could not show, and what would

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]


def lock_problem(directory: Path, release_wait_s: float = RELEASE_WAIT_S) -> str | None:
    """None when a lock one process holds on a file in `directory` excludes another process and is freed when its
    holder is killed; else what went wrong. A filesystem without lock support grants every taker the lock."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".tmp-lockprobe-{uuid.uuid4().hex}"
    path.write_bytes(b"lock probe of mai store check\n")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stderr is not None
        if holder.stdout.readline().strip() != "locked":
            holder.wait(timeout=30)
            reason = (holder.stderr.read().strip().splitlines() or ["it exited"])[-1]
            return f"a process could not take an exclusive lock here ({reason})"
        with open(path, "r+b") as handle:
            if try_exclusive(handle.fileno()):
                return "a second process took the exclusive lock another process held: locks do not exclude here"
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            if not _wait_for(lambda: try_exclusive(handle.fileno()), release_wait_s):
                return f"the lock of a killed process was not freed within {release_wait_s:g} s"
        return None
    except OSError as error:
        return f"taking a lock failed: {error.strerror or error}"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=30)
        path.unlink(missing_ok=True)


def try_exclusive(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: frozenset[str]


def mount_of(path: Path) -> Mount | None:
    """The mount `path` is on: the longest mount point above it, the last mounted of equal ones (it covers the
    others); None where the OS lists no mounts."""
    target = str(path.resolve())
    above = sorted((m for m in psutil.disk_partitions(all=True)
                    if target == m.mountpoint or target.startswith(m.mountpoint.rstrip("/") + "/")),
                   key=lambda m: len(m.mountpoint))
    return Mount(above[-1].mountpoint, above[-1].fstype, frozenset(above[-1].opts.split(","))) if above else None


# filesystems whose files other hosts reach over the network; FUSE ones are told by their type's `fuse` prefix
# (fuse.sshfs, fuseblk), and everything else is local
NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "lustre", "ceph", "cifs", "smb3", "glusterfs", "gpfs", "beegfs",
                                 "9p", "virtiofs", "afs", "ocfs2", "gfs2", "panfs", "weka", "wekafs"})


def filesystem_kind(mount: Mount | None) -> str:
    """`network`, `fuse`, `local`, or `unknown` (no mount table)."""
    if mount is None:
        return "unknown"
    if mount.fstype.startswith("fuse"):
        return "fuse"
    return "network" if mount.fstype in NETWORK_FILESYSTEMS else "local"


def host_local_locks(mount: Mount | None) -> str | None:
    """Mount options that keep locks on each host of a shared filesystem (two hosts would compute the same
    outputs), else None."""
    if mount is None:
        return None
    local = {"local_lock=flock", "local_lock=all", "nolock"} if mount.fstype.startswith("nfs") else \
        {"localflock"} if mount.fstype == "lustre" else set()
    found = sorted(local & mount.options)
    return f"{mount.fstype} mount {mount.point} has {', '.join(found)}: its locks stay on this host" if found else None


# probed once per process and filesystem, not cached in the store: whether locks, rename and links work is a property
# of each host's mount (NFS options, FUSE, a remount), which other hosts sharing the store do not share. The probes
# cost three short child processes and a few MiB written (~0.1-0.3 s), against model loads of seconds.
_PROBED: dict[int, Check | None] = {}
_PROBING = threading.Lock()


def require_working_store(directory: Path) -> None:
    """Raises ConfigError when the filesystem `directory` is on fails a check a run depends on (locks, atomic rename,
    symlinks): a run or shard then stops before it loads a model, instead of computing what another claimant computes
    or publishing files that readers see in part."""
    directory.mkdir(parents=True, exist_ok=True)
    device = os.stat(directory).st_dev
    # cheapest first, each only after the earlier ones passed; a mount option that keeps locks on one host fails the
    # locks check without a probe
    probes: dict[str, Callable[[], str | None]] = {
        "locks across processes": lambda: host_local_locks(mount_of(directory)) or lock_problem(directory),
        "atomic rename": lambda: rename_problem(directory), "symlinks": lambda: symlink_problem(directory)}
    with _PROBING:
        if device not in _PROBED:
            _PROBED[device] = next((check for name, probe in probes.items()
                                    if not (check := _probed(name, probe)).passed), None)
        failed = _PROBED[device]
    if failed is not None:
        raise ConfigError(f"the store's filesystem at {directory} fails the {failed.name} check ({failed.meaning}); "
                          f"runs refuse it. To fix: {failed.fix} (`mai store check` there shows every check)")


def rename_problem(directory: Path, versions: int = RENAME_VERSIONS) -> str | None:
    """None when files renamed over one name (temp + os.replace) are seen whole by a process reading it all along,
    and the last one replaced the others; else what the reader saw."""
    path = directory / f".tmp-renameprobe-{uuid.uuid4().hex}"
    path.write_bytes(_version(0))
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "reading":
            return "a second process could not read the file"
        for number in range(1, versions + 1):
            temp = path.with_name(f"{path.name}-{number}")
            temp.write_bytes(_version(number))
            os.replace(temp, path)
        reads, bad, *seen = reader.communicate("stop\n", timeout=60)[0].split()
        last = path.read_bytes()
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        path.unlink(missing_ok=True)
    if int(bad):
        return f"a reading process saw {bad} partial or missing files of {reads} reads ({', '.join(seen)})"
    return None if last == _version(versions) else "a rename did not replace the file it was renamed over"


def _version(number: int) -> bytes:
    """A file whose reader can tell it is whole: its length, then 16-144 KiB of data, then `$`."""
    body = bytes([48 + number % 10]) * (16384 * (1 + number % 9)) + b"$"
    return f"{len(body)}:".encode() + body


def symlink_problem(directory: Path) -> str | None:
    """None when a link can be made, replaced by rename (as compaction swaps a partition's version) and read
    through; else what failed."""
    base = Path(tempfile.mkdtemp(prefix=".tmp-linkprobe-", dir=directory))
    try:
        for number in (1, 2):
            (base / f"v{number}").mkdir()
            (base / f"v{number}" / "data").write_text(f"version {number}")
            os.symlink(f"v{number}", base / f"link{number}")
            os.replace(base / f"link{number}", base / "current")
            if (base / "current" / "data").read_text() != f"version {number}":
                return f"reading through the link after its swap to version {number} gave another version"
        return None
    except OSError as error:
        return f"{error.strerror or error} ({error.filename or ''})"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def fsync_problem(directory: Path) -> str | None:
    """None when a written file can be fsync'ed, through the handle that wrote it and a read-only one (as the store
    syncs a batch file a library wrote); else the error."""
    path = directory / f".tmp-fsyncprobe-{uuid.uuid4().hex}"
    try:
        with open(path, "wb") as handle:
            handle.write(b"fsync probe\n")
            handle.flush()
            os.fsync(handle.fileno())
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        return None
    except OSError as error:
        return error.strerror or str(error)
    finally:
        path.unlink(missing_ok=True)


def check_store(root: Path, min_free_gib: float = MIN_FREE_GIB) -> StoreReport:
    """Every need of the store, tested on `root` (made if needed), in the order `mai store check` prints them, and
    what this host could not prove."""
    directory = root / "locks"  # where the probes write: on the store's filesystem, beside its lock files
    directory.mkdir(parents=True, exist_ok=True)
    mount = mount_of(directory)
    kind = filesystem_kind(mount)
    where = f"{mount.fstype} at {mount.point}" if mount else "this filesystem (no mount table to read)"
    usage = shutil.disk_usage(root)
    free, total = usage.free / 2**30, usage.total / 2**30
    checks = [_probed("locks across processes", lambda: lock_problem(directory)),
              _outcome("lock mount options", host_local_locks(mount), {
                  "local": f"{where} is a local filesystem: its locks exclude this host's processes, and no other "
                           "host reaches it (hosts share a store on a network filesystem)",
                  "network": f"{where} is a network filesystem with no mount option that keeps its locks on this "
                             "host" + (" (the NFS server holds them; a lost host's are freed when its lease expires, "
                                       "about 90 s)" if mount is not None and mount.fstype.startswith("nfs") else ""),
                  "fuse": f"{where} is a FUSE filesystem: its daemon decides whether a lock reaches other hosts "
                          "(sshfs, s3fs and bindfs keep locks on this host), which no mount option shows",
                  "unknown": f"{where}: no mount option to check"}[kind],
                  "remount without local_lock/nolock (NFS) or with flock instead of localflock (Lustre), so that "
                  "hosts sharing the store see each other's locks"),
              _probed("atomic rename", lambda: rename_problem(directory)),
              _probed("symlinks", lambda: symlink_problem(directory)), _probed("fsync", lambda: fsync_problem(directory)),
              _outcome("free space", None if free >= min_free_gib else
                       f"{free:.2f} GiB free of {total:.1f} GiB, under {min_free_gib:g} GiB",
                       f"{free:.1f} GiB free of {total:.1f} GiB",
                       "free some space (a full disk stops runs mid-stage; what they stored is kept)")]
    reach = {"local": "no other host reaches this local filesystem, so a store here serves this host only",
             "fuse": "on a FUSE filesystem that is the daemon's choice, so assume they do not until shown"}
    return StoreReport(checks, [
        "locks between hosts: that a lock taken on another host excludes this host's processes. A check run on one "
        "host cannot show it; only a probe run on every host sharing the store, each trying the locks the others "
        "hold, can" + (f" ({reach[kind]})" if kind in reach else "")])


def _outcome(name: str, problem: str | None, works: str, fix: str) -> Check:
    return Check(name, problem is None, works if problem is None else problem, "" if problem is None else fix)


# what a passed probe means for the store, and what to do when it fails
_PROBES = {
    "locks across processes": (
        ("a lock held by one process excludes another, and the kernel frees it when its holder is killed: claims "
         "compute each output once, and a dead worker's shards are taken over"),
        ("mount the store with working file locks (NFS: without nolock or local_lock=flock|all; Lustre: flock, not "
         "localflock), or use another store")),
    "atomic rename": (("a file renamed over another replaces it whole: readers see the old file or the new one, "
                       "never a part"), "use a filesystem whose rename is atomic (not an object-store mount)"),
    "symlinks": ("links can be made and swapped by rename: each partition's path is a link to its current version",
                 "use a filesystem with symbolic links (compaction publishes partitions through them)"),
    "fsync": ("written files can be flushed to disk before they are published", "use a filesystem that supports fsync"),
}


def _probed(name: str, probe: Callable[[], str | None]) -> Check:
    """A probe's check; a filesystem error that stopped it is its problem (a read-only store fails every probe), and
    a full disk (ENOSPC: the first write fails so) is named as such, which no mount option fixes."""
    works, fix = _PROBES[name]
    try:
        problem = probe()
    except OSError as error:
        problem = f"{error.strerror or error}" + (f": {error.filename}" if error.filename else "")
    if problem is not None and os.strerror(errno.ENOSPC) in problem:
        problem = f"the store's disk is full ({problem})"
        fix = "free some space on the store's disk (`df -h` on it), then run again; what runs stored is kept"
    return _outcome(name, problem, works, fix)


# --- locks between hosts (`mai store check --pool`, flows/cross_host_check.py) ------------------------------------

CROSS_HOST_PROBES = "cross-host-lock-probes"  # under the store's locks/: one directory per probe


@dataclass(frozen=True)
class HostProbe:
    """One participant's result: the hosts whose held lock it took (their locks do not exclude this host's)."""

    host: str
    took: list[str]
    kernel: str = ""  # the boot id of the kernel it ran on ('' where the OS has none): hosts on one kernel prove nothing


def this_kernel() -> str:
    """This machine's boot id (Linux: random per boot), '' where the OS has none. "Hosts" that report one boot id are
    one machine (containers on it), whose locks exclude each other whatever the filesystem does between machines."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def cross_host_lock_probe(directory: Path, host: str, participants: int, timeout_s: float = 60.0) -> HostProbe:
    """One participant of a probe run at once by `participants` processes, one per host, each in `directory` as its
    host mounts it. Each holds a lock on a file of its own until every participant holds one, then tries each other
    one's lock without waiting, keeps its own until every participant has tried, and publishes what it took
    (`<file>.done`, read by `cross_host_results`)."""
    directory.mkdir(parents=True, exist_ok=True)
    mine = directory / f"{host}.{uuid.uuid4().hex[:8]}.lock"
    took: list[str] = []
    with open(mine, "w+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(host.encode())
        handle.flush()
        mine.with_suffix(".ready").touch()
        _await_files(directory, "*.ready", participants, timeout_s, "hold their locks")
        for theirs in sorted(set(directory.glob("*.lock")) - {mine}):
            with open(theirs, "r+b") as other:
                if try_exclusive(other.fileno()):
                    took.append(theirs.read_text().strip() or theirs.name.split(".")[0])
                    fcntl.flock(other.fileno(), fcntl.LOCK_UN)
        probe = HostProbe(host, sorted(took), this_kernel())
        mine.with_suffix(".done").write_text(json.dumps(asdict(probe)))
        _await_files(directory, "*.done", participants, timeout_s, "try the others' locks")
    return probe


def cross_host_results(directory: Path) -> list[HostProbe]:
    return [HostProbe(**json.loads(path.read_text())) for path in sorted(directory.glob("*.done"))]


def on_one_kernel(probes: list[HostProbe]) -> bool:
    kernels = {probe.kernel for probe in probes}
    return len(probes) > 1 and len(kernels) == 1 and "" not in kernels


def hosts_whose_locks_leak(probes: list[HostProbe]) -> list[str]:
    return [f"{probe.host} took the lock {other} held" for probe in probes for other in probe.took]


def _await_files(directory: Path, pattern: str, count: int, timeout_s: float, what: str) -> None:
    if not _wait_for(lambda: len(list(directory.glob(pattern))) >= count, timeout_s):
        raise ConfigError(f"only {len(list(directory.glob(pattern)))} of {count} hosts of the lock probe in "
                          f"{directory} came to {what} within {timeout_s:g} s: are the workers' hosts mounting the "
                          "same store?")
