"""Numbers as SQL rounds them: DuckDB's `round(x, n)` rounds half away from zero (0.8125 -> 81.3 at one decimal),
Python's format rounds the binary value half to even (81.2). Every number the report and `mai sql`'s text show
goes through `fixed`, so a cell equals the SQL that reproduces it. No imports beyond the standard library: `mai sql`
formats with it too."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal


def sql_round(value: float, digits: int) -> Decimal:
    """`value` rounded as DuckDB rounds a DOUBLE: its exact binary value, half away from zero (59.55 is stored as
    59.5499..., so 59.5; 81.25 is exact, so 81.3). Scaling first (value * 10**digits, then rounding) would differ:
    59.55 * 10 is 595.5 after the multiplication's own rounding."""
    return Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)


def fixed(value: float, digits: int, sign: bool = False) -> str:
    """`value` with `digits` decimals, rounded half away from zero (`sql_round`); `sign`: always a + or -."""
    if not math.isfinite(value):
        return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    rounded = sql_round(float(value), digits)
    if rounded.is_zero():
        rounded = abs(rounded)  # no '-0.0'
    return f"{rounded:+f}" if sign else f"{rounded:f}"
