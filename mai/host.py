"""Which host this process runs on (and how busy it is), as the store's shared records name it (vLLM server registry, leases, model
checks). `MAI_HOST_NAME` overrides the kernel's host name: for tests that simulate hosts in one machine, and for
clusters whose machines share one host name (containers started from one image). A UTS namespace (`unshare -u`
then `hostname B`) changes `socket.gethostname()` itself, so namespaced hosts need no override."""

from __future__ import annotations

import os
import socket

HOST_ENV = "MAI_HOST_NAME"


def host_name() -> str:
    return os.environ.get(HOST_ENV) or socket.gethostname()


def one_minute_load() -> float | None:
    """The 1-minute load average now (None where the OS has none): sampled around each engine call."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
