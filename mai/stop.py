"""A process-wide stop request: SIGTERM (a scheduler, `timeout`, Prefect cancelling a flow run) stops a run within
one decoding step, keeping everything it wrote.

Model calls run in worker threads and a signal reaches only the main thread, so the handler sets a flag that the
engines check between batches and at every decoding step (`check`): the batch in flight is abandoned (never stored,
as a killed batch), the batches before it are in the store, and the same run again computes only the rest.
`on_sigterm` installs the handler on top of whatever handles SIGTERM already (the CLI's) and calls that one too;
where Prefect's flow engine has its own installed (a flow run's process), it leaves that one and requests the stop
when its TerminationSignal passes: Prefect acknowledges a runner's cancellation only while its handler is the
installed one, and then ends the flow run Cancelled rather than Crashed.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

# the process's one stop request: set once (the first reason wins), read by every thread
_REQUESTED = threading.Event()
_REASONS: list[str] = []


class StopRequested(BaseException):
    """Raised where work stops after a stop request. A BaseException, like KeyboardInterrupt: no `except
    Exception` on the way swallows it, and Prefect treats it as a crash (never retried), not as a failure."""


def request_stop(reason: str) -> None:
    if not _REQUESTED.is_set():
        _REASONS.append(reason)
    _REQUESTED.set()


def stop_requested() -> bool:
    return _REQUESTED.is_set()


def reason() -> str:
    return _REASONS[0] if _REASONS else "stop requested"


def check() -> None:
    """Raises StopRequested once a stop was requested; cheap enough for every decoding step."""
    if _REQUESTED.is_set():
        raise StopRequested(reason())


def clear() -> None:
    """Forget a stop request (tests, or a process that handled it and goes on)."""
    _REQUESTED.clear()
    _REASONS.clear()


Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


@contextmanager
def on_sigterm(then_raise: bool = False) -> Iterator[None]:
    """While inside: SIGTERM requests a stop, then runs the handler it replaced; Ctrl-C (SIGINT, where Python's own
    handler has it) requests a stop, then raises KeyboardInterrupt as that handler does (Prefect's bridge raises its
    TerminationSignal in the main thread). With `then_raise` (the command line, outside any flow), the first
    SIGTERM also raises StopRequested in the main thread, like Ctrl-C; a later one (Prefect re-sending the signal
    to the handler it saved, after its flow crashed) only keeps the request. Off the main thread: no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prefects = _prefect_owns_sigterm()
    previous: Handler = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        first = not stop_requested()
        request_stop(f"stopped by signal {signal.Signals(signum).name}")
        if callable(previous):
            previous(signum, frame)
        elif then_raise and first:
            raise StopRequested(reason())

    def interrupted(signum: int, frame: FrameType | None) -> None:
        # Ctrl-C is a stop request too: a KeyboardInterrupt that lands inside a library call that swallows it (an
        # API client's) still stops the work at its next `check`
        request_stop("interrupted (Ctrl-C)")
        raise KeyboardInterrupt

    previous_int: Handler = signal.getsignal(signal.SIGINT)
    if not prefects:
        signal.signal(signal.SIGTERM, handler)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    except BaseException as error:
        if prefects and type(error).__name__ == "TerminationSignal":  # Prefect's bridge raised it: a SIGTERM
            request_stop("stopped by signal SIGTERM")
        raise
    finally:
        if not prefects:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)


def _prefect_owns_sigterm() -> bool:
    """Whether Prefect's flow engine has its SIGTERM handler installed (in a flow run). Prefect is looked up, never
    imported: a run in this process without Prefect (`mai run --local`) does not load it."""
    engine = sys.modules.get("prefect.utilities.engine")
    return engine is not None and bool(engine.is_prefect_sigterm_handler_installed())
