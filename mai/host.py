"""Which host this process runs on (and how busy it is), as the store's shared records name it (vLLM server registry, leases, model
checks). `MAI_HOST_NAME` overrides the kernel's host name: for tests that simulate hosts in one machine, and for
clusters whose machines share one host name (containers started from one image). A UTS namespace (`unshare -u`
then `hostname B`) changes `socket.gethostname()` itself, so namespaced hosts need no override."""

from __future__ import annotations

import os
import socket
from pathlib import Path

HOST_ENV = "MAI_HOST_NAME"


def host_name() -> str:
    return os.environ.get(HOST_ENV) or socket.gethostname()


def one_minute_load() -> float | None:
    """The 1-minute load average now (None where the OS has none): sampled around each engine call."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def process_age_s() -> float | None:
    """Seconds since this process started (the kernel's record: its start time in clock ticks after boot), None
    where /proc has none: a command's start-up (the interpreter, its imports) before any of its own work."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime_s - started_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
