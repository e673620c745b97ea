"""Which failures are a host's and which are the run's. A drain on a worker (flows/drain.py) whose host cannot do
the work (the store missing, read-only, unwritable or full there; mai or a package it needs that cannot be imported;
other code than the run was planned with; a model that does not load; a GPU out of memory) is taken out of the run,
and another host takes its shard. Any other failure (a bad benchmark row, a bug) would fail on every host: it fails
the run, once."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

from mai.errors import ConfigError, ModelLoadError

# errors of writing the store where this host mounts it, and what fixes them
_STORE_ERRNOS = {
    errno.EROFS: "the store is mounted read-only on this host: mount it read-write",
    errno.EACCES: "the worker's user ({user}) may not write the store here: give it write access, or run the worker "
                  "as a user who can",
    errno.EPERM: "the worker's user ({user}) may not write the store here: give it write access, or run the worker "
                 "as a user who can",
    errno.ENOSPC: "the filesystem where this host writes the store is full: free space there",
    errno.EDQUOT: "the worker's user ({user}) is over its disk quota where this host writes the store: free space or "
                  "raise the quota",
}


def host_fault(error: BaseException) -> str | None:
    """Why this host cannot do the run's work, with the fix, in one line; None when `error` is not the host's (it
    would fail the same on every host). Looks through the exceptions `error` was raised from."""
    for cause in _chain(error):
        if isinstance(cause, ConfigError | ModelLoadError):
            return str(cause)
        if isinstance(cause, OSError) and cause.errno in _STORE_ERRNOS:
            fix = _STORE_ERRNOS[cause.errno].format(user=_user())
            return f"{cause}: {fix}"
        if isinstance(cause, ImportError):
            return (f"it cannot import what the run needs ({type(cause).__name__}: {cause}): install mai and its "
                    "packages there as on the host that planned the run")
        if _out_of_memory(cause):
            first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
            return (f"its GPU ran out of memory ({first}): free the GPU (another process may hold its memory) or run "
                    "with a smaller --batch-size")
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _out_of_memory(error: BaseException) -> bool:
    """torch's CUDA out-of-memory error (torch.cuda.OutOfMemoryError), told by name: the core imports no torch."""
    return any(kind.__name__ == "OutOfMemoryError" and kind.__module__.startswith("torch")
               for kind in type(error).__mro__)


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"
