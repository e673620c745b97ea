"""Expected failures stay one line on the terminal, also when they happen inside a flow: of the file system, and a
Prefect API that stops answering mid-run.

A flow command that meets a read-only store or a full disk half-way (a task writing its routes, a compaction) ends
with the CLI's one line saying what to do (cli/__init__.py). Before that line, Prefect's engines log the task's
and the flow's failure at ERROR, the exception's traceback included, to the console: some 70 lines that bury the one
that matters. `quiet_expected_failures` drops exactly those records from the console handlers; every other record,
and the same records on their way to the Prefect API (the run's logs in the UI keep the traceback), are untouched.
A ConfigError raised inside a flow (a fanned-out run that finds no worker polling: flows/fanout.py) is the same:
the CLI says it in one line, so the engines' records of it stay off the console.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection

from mai.errors import ConfigError, RunFailed


class ExpectedFailureFilter(logging.Filter):
    """Refuses a record that carries, or reports in its message, an OSError of one of `errnos`, or that carries a
    ConfigError."""

    def __init__(self, errnos: Collection[int]) -> None:
        super().__init__()
        self.errnos = frozenset(errnos)
        numbers = "|".join(str(number) for number in sorted(self.errnos))
        # how Prefect's engines write the exception into a message: `OSError(30, '...')` ("failed with exception",
        # "Encountered exception") and `OSError: [Errno 30] ...` (the Failed state's message); PermissionError alike
        self._reported = re.compile(rf"Error(?:\((?:{numbers}),|: \[Errno (?:{numbers})\])")

    def filter(self, record: logging.LogRecord) -> bool:
        from mai.flows.prefect_api import api_lost

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, OSError) and error.errno in self.errnos or isinstance(error, ConfigError | RunFailed):
            return False
        if (error is not None and api_lost(error) is not None
                or record.levelno >= logging.WARNING and _API_LOST.search(record.getMessage())):
            logging.raiseExceptions = False  # else Prefect's log shipper writes its own failures to stderr
            return False
        return not (record.levelno >= logging.ERROR and self._reported.search(record.getMessage()))


# how Prefect's records report that its API stopped answering (the CLI's one line says it: flows/prefect_api.py):
# httpx's transport errors in a task's or flow's failure, the events client's websocket, its events worker
_API_LOST = re.compile(r"\b(?:Connect|Read|Write|Pool)(?:Error|Timeout)\b|RemoteProtocolError|Unable to connect to "
                       r"'ws|All connection attempts failed|Connect call failed|'EventsWorker' failed to process item")


# the loggers whose records report a run's failure: Prefect's flow and task engines, and (a lost API) its events
# client and events worker, which may be the first to log at all: with PREFECT_LOGGING_LEVEL=WARNING the engines
# log nothing before the failure, and the console filter must be in place before the events client's warning
REPORTING_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "prefect.events.clients", "prefect._internal.concurrency")


class _InstallOnFirstRecord(logging.Filter):
    """On an engine logger: installs ExpectedFailureFilter on the console handlers when the first record comes (by
    then Prefect has set up its logging), passing every record on to them."""

    def __init__(self, errnos: Collection[int]) -> None:
        super().__init__()
        self.errnos = errnos

    def filter(self, record: logging.LogRecord) -> bool:
        _on_console_handlers(self.errnos)
        return True


def quiet_expected_failures(errnos: Collection[int]) -> None:
    """Keep the engines' failure records of an OSError of `errnos` off the console. Imports no Prefect (a run
    answered from the store never loads it): the console filter is installed when one of REPORTING_LOGGERS logs its first record."""
    for name in REPORTING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _InstallOnFirstRecord) for f in logger.filters):
            logger.addFilter(_InstallOnFirstRecord(errnos))


def _on_console_handlers(errnos: Collection[int]) -> None:
    """The filter on Prefect's console handlers, once: the root logger's (where the engines' records go) and
    Prefect's internal services' (the events worker reports there when it cannot reach the API)."""
    for handler in [*logging.getLogger().handlers, *logging.getLogger("prefect._internal").handlers]:
        if (type(handler).__module__ == "prefect.logging.handlers" and isinstance(handler, logging.StreamHandler)
                and not any(isinstance(f, ExpectedFailureFilter) for f in handler.filters)):
            handler.addFilter(ExpectedFailureFilter(errnos))
