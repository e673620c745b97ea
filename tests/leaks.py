"""No test leaves a process behind: the `no_process_left` fixture (tests/conftest.py) fails a test that does, and
kills what it left.

A test's processes are told by an environment variable the fixture sets for the test's duration: every process the
test starts inherits it (`subprocess` passes `os.environ` on, `prefect_env` copies it), and so do theirs, however
they detach (a new session, a dead parent, reparented to init). Processes started before the test (the session's
Prefect server, a module's workers and their flow runs) do not carry it, so what they do after the test is not
counted. A process a test hands on to later tests on purpose (a simulated host kept for the module) is named with
`outlives_the_test`; it and its descendants are not counted either. A process that is still ending when the test
ends (a command being stopped) gets `GRACE_S` to end before it counts."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

MARK = "MAI_TEST_PROCESSES_OF"
GRACE_S = 30.0
_KEPT: set[int] = set()


def outlives_the_test(pid: int) -> None:
    """`pid` and its descendants are kept on purpose beyond the test that started them (a module's fixture ends
    them)."""
    _KEPT.add(pid)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _kept(pid: int) -> bool:
    while pid > 1:
        if pid in _KEPT:
            return True
        pid = _parent(pid)
    return False


def _marked(mark: str) -> dict[int, str]:
    """Live processes (zombies excluded) whose environment carries `mark`, with their command lines."""
    needle = f"{MARK}={mark}".encode()
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if state != "Z" and int(proc.name) != os.getpid():
            found[int(proc.name)] = command
    return found


def left_behind(mark: str, grace_s: float = GRACE_S) -> dict[int, str]:
    """The test's processes still alive after `grace_s` (waited for only while some are)."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = {pid: command for pid, command in _marked(mark).items() if not _kept(pid)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def kill(pids: Iterator[int] | list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
