"""One thread per process for model computation on the CPU.

PyTorch runs each CPU operator on an OpenMP team of `torch.get_num_threads()` threads, and every Python thread
that calls an operator gets a team of its own. GNU OpenMP spin-waits between parallel regions only while the
process has no more OpenMP threads than cores; past that it sleeps and wakes on a futex for every operator.
Generation on small models is thousands of tiny operators, so once two threads had computed (the two MV1 stages
run in two task threads) every later generation in the process ran about 2x slower (small model, R prompt, 64
samples: 2.5 s on one thread, 5.5 s on a second thread after the first had computed; docs/benchmarks.md,
"Cascade speed"). Two concurrent generations do not gain from the second core either: the Python side of
every decoding step holds the GIL.

So every engine call goes through `on_compute_thread`: one long-lived thread computes, one OpenMP team exists, and
callers in any thread wait for their result. Calls from two stages interleave batch by batch. On a GPU too: there
the CPU only launches kernels, one Python decoding loop per call, and two calls in two task threads took turns on the
GIL at every step (an 8B decoding step inside `mai run` took 90 ms on an H100, three times a plain `generate`
step: docs/benchmarks.md, "GPU"); one at a time, each step runs at the pace of a plain `generate`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_EXECUTOR: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()
_THREAD_NAME = "mai-compute"


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix=_THREAD_NAME)
        return _EXECUTOR


def on_compute_thread(fn: Callable[[], T]) -> T:
    """`fn()` on the process's compute thread; its exception (a stop request included) is raised here. A call
    made on the compute thread itself runs directly (no deadlock on nested calls)."""
    if threading.current_thread().name.startswith(_THREAD_NAME):
        return fn()
    return _executor().submit(fn).result()


def uses_compute_thread(device: str) -> bool:
    """Whether calls on `device` ("cpu", "cuda", "cuda:0") are serialised on the compute thread: on every device
    unless `MAI_COMPUTE_THREAD=off` runs them in the caller's thread (benchmarks/speedup.py measures both)."""
    return bool(device) and os.environ.get("MAI_COMPUTE_THREAD", "on") != "off"
