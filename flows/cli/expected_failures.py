"""Expected failures of the file system stay one line on the terminal, also when they happen inside a flow.

A flow command that meets a read-only store or a full disk half-way (a task writing its routes, a compaction) ends
with the CLI's one line saying what to do (flows/cli/__init__.py). Before that line, Prefect's engines log the task's
and the flow's failure at ERROR, the exception's traceback included, to the console: some 70 lines that bury the one
that matters. `quiet_expected_failures` drops exactly those records from the console handlers; every other record,
and the same records on their way to the Prefect API (the run's logs in the UI keep the traceback), are untouched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection


class ExpectedFailureFilter(logging.Filter):
    """Refuses a record that carries, or reports in its message, an OSError of one of `errnos`."""

    def __init__(self, errnos: Collection[int]) -> None:
        super().__init__()
        self.errnos = frozenset(errnos)
        numbers = "|".join(str(number) for number in sorted(self.errnos))
        # how Prefect's engines write the exception into a message: `OSError(30, '...')` ("failed with exception",
        # "Encountered exception") and `OSError: [Errno 30] ...` (the Failed state's message); PermissionError alike
        self._reported = re.compile(rf"Error(?:\((?:{numbers}),|: \[Errno (?:{numbers})\])")

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, OSError) and error.errno in self.errnos:
            return False
        return not (record.levelno >= logging.ERROR and self._reported.search(record.getMessage()))


def quiet_expected_failures(errnos: Collection[int]) -> None:
    """Install the filter on the console handlers of the root logger (where Prefect's console handler is)."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.logging.handlers import PrefectConsoleHandler

    ensure_logging_setup()  # the handlers exist from here on (Prefect reconfigures them incrementally, in place)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
                isinstance(f, ExpectedFailureFilter) for f in handler.filters):
            handler.addFilter(ExpectedFailureFilter(errnos))
