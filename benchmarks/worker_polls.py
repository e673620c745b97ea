"""What idle Prefect workers cost their server: a `prefect server start` (SQLite, a temporary PREFECT_HOME, on
127.0.0.1), a process work pool and N workers that poll it every `--query-seconds` (heartbeat every 5 s, as the
tests' workers) and take nothing; after a 25 s settle, the server's and the workers' CPU seconds over 60 s. Run with
two intervals, the difference gives the server's CPU per poll (docs/cluster.md, PREFECT_WORKER_QUERY_SECONDS).

Run: `.venv/bin/python benchmarks/worker_polls.py [--workers 4] [--query-seconds 1,2]` (Linux only).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil

SETTLE_S, MEASURED_S = 25.0, 60.0


def _cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        for member in [process, *process.children(recursive=True)]:
            times = member.cpu_times()
            total += times.user + times.system
    return total


def measure(workers: int, query_s: float) -> tuple[float, float]:
    """The server's and the workers' CPU seconds over MEASURED_S."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PREFECT_UI_ENABLED": "false", "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
               "PREFECT_WORKER_QUERY_SECONDS": f"{query_s:g}", "PREFECT_WORKER_PREFETCH_SECONDS": "0",
               "PREFECT_WORKER_HEARTBEAT_SECONDS": "5"}
        prefect = [sys.executable, "-m", "prefect"]

        def start(*args: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen([*prefect, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        server = start("server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui")
        started: list[subprocess.Popen[bytes]] = []
        try:
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.5)
            if start("--no-prompt", "work-pool", "create", "polls", "--type", "process").wait() != 0:
                raise RuntimeError("the work pool could not be created")
            started = [start("worker", "start", "--pool", "polls", "--name", f"w{i}") for i in range(workers)]
            time.sleep(SETTLE_S)
            server_process, worker_processes = psutil.Process(server.pid), [psutil.Process(w.pid) for w in started]
            before = _cpu([server_process]), _cpu(worker_processes)
            time.sleep(MEASURED_S)
            return _cpu([server_process]) - before[0], _cpu(worker_processes) - before[1]
        finally:
            for process in [*started, server]:
                process.send_signal(signal.SIGKILL if process is not server else signal.SIGTERM)
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--query-seconds", default="1,2")
    args = parser.parse_args()
    measured = {}
    for query_s in [float(value) for value in args.query_seconds.split(",")]:
        server_s, workers_s = measure(args.workers, query_s)
        measured[query_s] = server_s
        print(f"{args.workers} workers polling every {query_s:g} s: server {server_s:.1f} CPU-s, workers "
              f"{workers_s:.1f} CPU-s in {MEASURED_S:g} s", flush=True)
    if len(measured) >= 2:
        (fast, fast_cpu), (slow, slow_cpu) = sorted(measured.items())[:2]
        polls = args.workers * MEASURED_S * (1 / fast - 1 / slow)
        print(f"the server's CPU per poll: {1000 * (fast_cpu - slow_cpu) / polls:.0f} ms")


if __name__ == "__main__":
    main()
