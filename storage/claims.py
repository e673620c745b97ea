"""Claims on identities being computed, so that runs and workers sharing one store compute each identity once.

A namespace is one directory of content-addressed outputs (e.g. one model's S generations). To compute ids:
1. under a short lock of the namespace (a `filelock` lock file), read the live claims and the stored ids, take
   the ids that are neither stored nor claimed by a live claimant, and publish a claim file listing them, on
   which the claimant holds an exclusive `flock` for as long as it works;
2. compute the claimed ids and write them to the store; drop the claim;
3. wait for the ids that others claimed: they appear in the store, or their claimant died (its flock is free
   again), and then they are claimed anew.

Why flock and not Prefect's transaction isolation with its `FileSystemLockManager`: those lock files expire
after a time-to-live, so a SIGKILLed holder blocks an identity until the expiry and a slow holder loses it to a
second generator. The kernel releases a flock exactly when its holder dies (SIGKILL included), on a local disk
and on NFSv4. Several threads of one process are separate claimants: locally a flock belongs to an open file; on
NFS, where flock is emulated with POSIX locks that belong to a process, because a process never probes the files
it holds itself (`_HELD_HERE`) and its threads take the claim section one at a time (`_section`).
A store whose locks, renames or links do not work (storage/filesystem_check.py) is refused at the first claim or
lease of a process.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Self

from filelock import FileLock

from mai import stop
from mai.host import host_name
from mai.identity import canonical_hash
from mai.storage.filesystem_check import require_working_store, try_exclusive
from mai.storage.paths import Home

POLL_S = 0.25
# which of the given ids the store holds (a lookup of just those ids: a store may hold millions)
Stored = Callable[[list[str]], set[str]]

# The claim and lease files whose locks this process holds, with the ids claimed. On NFS a POSIX lock belongs to the
# process: another thread's probe of such a file would be granted the lock (taking a live claim for a dead one), and
# closing any descriptor of the file (a probe's, a read's) drops the holder's lock. So this process never opens a
# file it holds: held here is alive, and its ids are known.
_HELD_HERE: dict[Path, list[str]] = {}
_SECTIONS: dict[Path, threading.Lock] = {}
_HERE_LOCK = threading.Lock()


def _hold(path: Path, ids: list[str] | None = None) -> None:
    with _HERE_LOCK:
        _HELD_HERE[path] = ids or []


def _let_go(path: Path, handle: IO[bytes] | None = None) -> None:
    if handle is not None:
        handle.close()  # closing releases the flock
    with _HERE_LOCK:
        _HELD_HERE.pop(path, None)


def held_by_this_process(path: Path) -> bool:
    """Whether this process holds the lease or claim at `path` (a drain's shard, which its subflow must not take
    again: a second flock of one file from one process would wait for itself)."""
    with _HERE_LOCK:
        return path in _HELD_HERE


@contextmanager
def _section(lock_path: Path) -> Iterator[None]:
    """A claim section: its FileLock excludes other processes; a thread lock first excludes this process's other
    threads, which the FileLock does not where locks are per process (NFS)."""
    with _HERE_LOCK:
        threads = _SECTIONS.setdefault(lock_path, threading.Lock())
    with threads, FileLock(str(lock_path)):
        yield


def _lockable(path: Path) -> bool | None:
    """Whether no live process holds the lock of `path` (taken and let go at once; this process's own files are
    held); None when there is no such file."""
    if held_by_this_process(path):
        return False
    try:
        # opened for writing: on NFS, Linux emulates flock with POSIX byte-range locks, and an exclusive one needs a
        # file open for writing (EBADF otherwise); locally it changes nothing
        with open(path, "r+b") as handle:
            return try_exclusive(handle.fileno())
    except FileNotFoundError:
        return None


def _is_dead(path: Path) -> bool:
    """A claim file whose claimant is gone (removes it); a file that no longer exists counts as gone."""
    if _lockable(path) is False:
        return False
    path.unlink(missing_ok=True)
    return True


class Claim:
    """Ids this claimant must compute (`mine`) and ids live claimants are computing (`theirs`, by claim file).
    A context manager: leaving it drops the claim, whatever happened."""

    def __init__(self, mine: list[str], theirs: dict[Path, set[str]], path: Path | None = None,
                 handle: IO[bytes] | None = None) -> None:
        self.mine, self.theirs, self.path, self._handle = mine, theirs, path, handle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            _let_go(self.path, self._handle)
        self.path, self._handle = None, None


class ClaimBoard:
    """The claims of one namespace of one store."""

    def __init__(self, home: Home, namespace: str) -> None:
        key = canonical_hash(namespace)[:24]
        self.directory = home.claims / key
        self.lock_path = home.locks / f"claims-{key}.lock"

    def claim(self, wanted: Iterable[str], stored: Stored) -> Claim:
        ids = list(dict.fromkeys(wanted))
        require_working_store(self.directory)  # makes it; never claim on a store whose claims would not exclude anyone
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with _section(self.lock_path):
            theirs = self._live_claims()
            taken: set[str] = set().union(*theirs.values())
            existing = stored(ids)
            relevant = {path: rest for path, claimed in theirs.items() if (rest := claimed & set(ids) - existing)}
            mine = [g for g in ids if g not in existing and g not in taken]
            return Claim(mine, relevant, *self._publish(mine)) if mine else Claim([], relevant)

    def wait_for_others(self, claim: Claim, stored: Stored) -> list[str]:
        """Blocks until every id of `claim.theirs` is stored, or returns the ids whose claimant died (to claim
        them again; a live claimant may still take some of them first)."""
        awaited = sorted(set().union(*claim.theirs.values()))
        while True:
            existing = stored(awaited)
            waiting = {path: rest for path, ids in claim.theirs.items() if (rest := ids - existing)}
            if not waiting:
                return []
            orphaned = [g for path, ids in waiting.items() if _is_dead(path) for g in ids]
            if orphaned:
                return sorted(set(orphaned) - stored(orphaned))
            stop.check()
            time.sleep(POLL_S)

    def _live_claims(self) -> dict[Path, set[str]]:
        claims: dict[Path, set[str]] = {}
        for path in sorted(self.directory.glob("*.claim")):
            if _is_dead(path):
                continue
            with _HERE_LOCK:  # this process's own claims from memory (reading would drop its lock on NFS)
                mine = _HELD_HERE.get(path)
            try:
                claims[path] = set(mine) if mine is not None else set(json.loads(path.read_text()))
            except (FileNotFoundError, json.JSONDecodeError):
                continue  # released between the glob and the read
        for temp in self.directory.glob(".tmp-*"):  # a claimant that died while publishing
            _is_dead(temp)
        return claims

    def _publish(self, ids: list[str]) -> tuple[Path, IO[bytes]]:
        """Lock first, then make the file visible: a visible claim file is always locked while its owner lives."""
        name = uuid.uuid4().hex
        temp, path = self.directory / f".tmp-{name}", self.directory / f"{name}.claim"
        _hold(temp)
        _hold(path, ids)
        try:
            handle = open(temp, "w+b")  # noqa: SIM115  (held for the claim's life)
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            handle.write(json.dumps(ids).encode())
            handle.flush()
            os.replace(temp, path)
        except BaseException:
            _let_go(path)
            raise
        finally:
            _let_go(temp)
        return path, handle


def compute_once(board: ClaimBoard, wanted: Iterable[str], stored: Stored,
                 compute: Callable[[list[str]], None]) -> int:
    """Computes (with `compute`, which must store its results before returning) every wanted id that is not
    stored, each once across all claimants, and returns how many ids this caller computed."""
    pending, computed = list(dict.fromkeys(wanted)), 0
    while pending:
        with board.claim(pending, stored) as claim:
            if claim.mine:
                compute(claim.mine)
                computed += len(claim.mine)
        pending = board.wait_for_others(claim, stored)
    return computed


class Lease:
    """A flock held on a file for as long as some work runs (a shard flow on a worker): whoever watches the work
    can tell a live worker from a dead one (SIGKILL, a lost machine) without heartbeats or timeouts. Entering waits
    for the lease; `Lease.try_take` takes it only if it is free."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.previous_holder = ""  # what the file said before this holder: a last holder that died unfinished
        self._handle: IO[bytes] | None = None

    @classmethod
    def try_take(cls, path: Path) -> Lease | None:
        """The lease held (use it as a context manager to let it go), or None when a live holder has it, this
        process included (its threads are separate holders; opening the file again would drop the lock on NFS)."""
        lease = cls(path)
        return lease if not held_by_this_process(path) and lease._take(blocking=False) else None

    def __enter__(self) -> Self:
        if self._handle is None:
            self._take(blocking=True)
        return self

    def _take(self, blocking: bool) -> bool:
        require_working_store(self.path.parent)  # a lease nobody can tell from a dead one would rerun live work
        _hold(self.path)
        handle = None
        try:
            handle = open(self.path, "a+b")  # noqa: SIM115  (kept open: the lock lives as long as the handle)
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BaseException as error:
            _let_go(self.path, handle)
            if isinstance(error, BlockingIOError):  # held by a live holder
                return False
            raise
        handle.seek(0)  # read through the locked handle itself: another handle's close would drop the lock on NFS
        self.previous_holder = handle.read().decode(errors="replace")
        handle.truncate(0)
        handle.write(json.dumps(_this_holder()).encode())
        handle.flush()
        self._handle = handle
        return True

    def __exit__(self, *exc: object) -> None:
        _let_go(self.path, self._handle)
        self._handle = None


def _this_holder() -> dict[str, object]:
    """Who holds a lease, for people and tests: host, process and its parent (a worker runs shards as children)."""
    return {"host": host_name(), "pid": os.getpid(), "ppid": os.getppid()}


def lease_is_held(path: Path) -> bool:
    return _lockable(path) is False


def lease_holder(path: Path) -> dict[str, object]:
    """What the lease file says about its (last) holder: host, pid, ppid; empty when there is none."""
    if held_by_this_process(path):  # this process (reading the file would drop its lock on NFS)
        return _this_holder()
    try:
        holder: dict[str, object] = json.loads(path.read_text() or "{}")
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return holder
