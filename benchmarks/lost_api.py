"""How long `mai run` takes to fail once its configured Prefect server dies (results in docs/benchmarks.md, "A lost
Prefect API").

A Prefect API app on SQLite (mai's temporary server's, started here and not by the command: it is the configured
API, PREFECT_API_URL), a store with the built-in demo models and data, and `mai run` on it; once the run has stored
its first outputs, the server is SIGKILLed. The script prints the seconds from the kill to the command's exit, its
exit status and its last line (the one error line), per repeat, at the client retries given (`--retries`: Prefect's
PREFECT_CLIENT_MAX_RETRIES; its default 5 when not given, with Prefect's jitter).

Run: `.venv/bin/python benchmarks/lost_api.py [--repeats 2] [--retries 3]` (about 1-4 minutes per repeat).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mai.api import quiet_library_progress_bars
from mai.flows.prefect_api import _await_api, _spawn_server
from mai.run.assets import build_demo_dataset, build_models
from mai.storage.paths import Home

REPO = Path(__file__).resolve().parents[1]
RUN = ["run", "--limit", "12", "--shards", "2", "--max-new-tokens", "R=32", "--json"]


def failing_after_the_kill(directory: Path, retries: int | None) -> tuple[float, int, str]:
    """One repeat in `directory`: (seconds from the server's kill to the command's exit, its exit status, its last
    line on stderr)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_HOME": str(directory / "prefect-home")}
    if retries is not None:
        env.update(PREFECT_CLIENT_MAX_RETRIES=str(retries), PREFECT_CLIENT_RETRY_JITTER_FACTOR="0")
    os.environ["PREFECT_HOME"] = env["PREFECT_HOME"]  # the server's own, not the user's
    server, url = _spawn_server(directory / "prefect.db")
    _await_api(server, url)
    home = Home.at(directory / "store")
    build_models(home)
    build_demo_dataset(home)
    command = subprocess.Popen([sys.executable, "-m", "mai.cli", "--home", str(home.root), *RUN], cwd=REPO,
                               env={**env, "PREFECT_API_URL": url}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        while not list(home.generations.glob("*/*/*.parquet")):
            if command.poll() is not None:
                raise SystemExit(f"the run ended before it stored anything: {command.communicate()[1][-2000:]}")
            time.sleep(0.1)
        server.send_signal(signal.SIGKILL)
        server.wait()
        killed = time.monotonic()
        _, err = command.communicate(timeout=900)
        return time.monotonic() - killed, command.returncode, (err.strip().splitlines() or [""])[-1]
    finally:
        for process in (command, server):
            if process.poll() is None:
                process.kill()
                process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--retries", type=int, default=None, help="PREFECT_CLIENT_MAX_RETRIES (Prefect's default)")
    args = parser.parse_args()
    quiet_library_progress_bars()  # the models' and data's build bars
    seconds = []
    for repeat in range(1, args.repeats + 1):
        with tempfile.TemporaryDirectory(prefix="mai-lost-api-") as directory:
            failed_s, status, line = failing_after_the_kill(Path(directory), args.retries)
        seconds.append(failed_s)
        print(f"repeat {repeat}: exit {status} {failed_s:.1f} s after the server's kill: {line[:160]}", flush=True)
    print(f"median: {statistics.median(seconds):.1f} s (retries: "
          f"{'Prefect default' if args.retries is None else args.retries})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
