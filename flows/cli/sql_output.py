"""`mai sql`'s answer on standard output, within the query's limits from the command's start to its last line: the
worker takes at most `mai.storage.query_results.FOR_PRINTING` of the result, and formatting it stops at the
timeout, before anything is written (a stopped command prints no half result)."""

from __future__ import annotations

import sys
import time

from mai.dashboards.render import format_chunks

from mai import api
from mai.errors import ConfigError


def print_answer(home: str | None, sql: str, style: str, timeout_s: float, memory_limit: str | None) -> None:
    started = time.monotonic()
    columns, rows = api.query(home, sql, timeout_s, memory_limit, for_printing=True)
    pieces: list[str] = []
    for piece in format_chunks(columns, rows, style):
        if time.monotonic() - started > timeout_s:
            raise ConfigError(f"the query was stopped after {timeout_s:g} s, while its {len(rows):,} rows were "
                              "formatted (raise the limit with --timeout, or narrow the result)")
        pieces.append(piece)
    for piece in pieces:
        sys.stdout.write(piece)
    sys.stdout.write("\n")
