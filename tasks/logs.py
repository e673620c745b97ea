"""The logger that flows and tasks write their decisions to: Prefect's run logger inside a flow or task run (its
lines reach the run's Logs tab in the UI), the `mai` logger when the same code runs outside one (a task's `.fn`
called directly, a script, a run answered from the store without Prefect: this module imports Prefect only where
a process already did)."""

from __future__ import annotations

import logging
import sys


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    if "prefect" in sys.modules:
        from prefect import get_run_logger
        from prefect.exceptions import MissingContextError

        try:
            return get_run_logger()
        except MissingContextError:
            pass
    return logging.getLogger("mai")
