"""Prefect calls made from synchronous code.

Prefect's `async_dispatch` functions (`run_deployment`, `create_progress_artifact`, ...) are typed
`T | Coroutine[Any, Any, T]`: inside an async flow or a running event loop they return a coroutine to await.
mai's flows and tasks are synchronous, so they get T; `synchronous` checks that and gives the type back.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def synchronous(result: T | Coroutine[Any, Any, T]) -> T:
    if isinstance(result, Coroutine):
        result.close()  # never awaited: close it instead of leaving a "never awaited" warning behind
        raise TypeError("a Prefect call returned a coroutine: mai calls Prefect from synchronous code only")
    return result
