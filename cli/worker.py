"""`mai worker`: Prefect's process worker (`prefect worker start`, with the options given) that stops when told to.

Prefect 3.9's process worker turns a first SIGTERM into a SIGINT to itself and then waits on its own shutdown,
which an idle worker was seen not to finish in minutes (docs/benchmarks.md, "Stopping"); only a second SIGTERM
ends it (Prefect then SIGKILLs it). This command runs the worker as its child: on SIGTERM or Ctrl-C it passes the
signal on, and ends the worker with SIGKILL if it has not ended `STOP_GRACE_S` later. A drain the worker ran (in a
session of its own, which the signal does not reach) sees its worker gone and stops within a decoding step, letting
go of its shard for another drain (flows/drain.py)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from types import FrameType

STOP_GRACE_S = 5.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser("worker", help="a Prefect process worker (`prefect worker start` and its options) "
                                                "that stops within seconds of SIGTERM or Ctrl-C")
    worker.add_argument("--pool", required=True, help="the work pool (mai-gpu)")
    worker.add_argument("--limit", type=int, default=1, help="flow runs at a time (default 1: one drain per GPU)")
    worker.add_argument("--name", help="the worker's name (name it after its host and GPU: gpu-07-gpu0)")
    worker.add_argument("options", nargs=argparse.REMAINDER,
                        help="after `--`: any other `prefect worker start` options")
    worker.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    named = ["--name", args.name] if args.name else []
    extra = args.options[1:] if args.options[:1] == ["--"] else args.options
    child = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", args.pool, "--limit",
                              str(args.limit), *named, *extra])
    asked: list[float] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        if not asked:
            asked.append(time.monotonic())
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            status = child.wait(timeout=0.2)
            return 128 + signal.SIGTERM if asked else status
        except subprocess.TimeoutExpired:
            if asked and time.monotonic() - asked[0] > STOP_GRACE_S:
                child.kill()  # its drains stop by themselves once it is gone
