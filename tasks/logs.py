"""The logger that flows and tasks write their decisions to: Prefect's run logger inside a flow or task run (its
lines reach the run's Logs tab in the UI), the `mai` logger when the same code runs outside one (a task's `.fn`
called directly, a script)."""

from __future__ import annotations

import logging

from prefect import get_run_logger
from prefect.exceptions import MissingContextError


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("mai")
