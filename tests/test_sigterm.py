"""SIGTERM (what `timeout`, schedulers and Prefect cancellation send) stops a run within a decoding step: the
command exits with 143 within seconds (not after the batch in flight and more), no manifest, every
stored file intact, and the same run again completes it, each identity generated once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mai.cli import EXIT_STOPPED
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from mai.storage.verify import verify_store
from tests.helpers import BUDGET, run

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

# one batch of two R outputs of 1500 tokens takes ~15 s on these cores: a SIGTERM that waited for the batch in
# flight would show
LONG = {**BUDGET, "R": 1500}
LIMIT = 4


def test_sigterm_stops_a_run_within_a_step_and_a_rerun_completes_it(home: Path) -> None:
    command = [sys.executable, "-m", "mai.cli", "--home", str(home), "run", "--limit", str(LIMIT), "--shards",
               "1", "--batch-size", "2", *[f"--max-new-tokens={k}={v}" for k, v in LONG.items()]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    store = Home.at(home)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if list(store.generations.glob("mai-tiny-small*/R/*.parquet")):
                break
            time.sleep(0.1)
        assert process.poll() is None, "the run finished before it could be stopped: raise the R budget"
        time.sleep(1.0)  # well inside the next R batch
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = process.communicate(timeout=120)
        elapsed = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == EXIT_STOPPED == 143, err
    assert elapsed < 10.0, f"stopping took {elapsed:.1f} s"
    assert "stopped by signal SIGTERM" in err and "Traceback" not in err
    assert not list(store.runs.glob("*/run.parquet"))  # no manifest: the run did not complete
    report = verify_store(store)
    assert report["problems"] == [], report["problems"]  # every file it wrote is whole, nothing half-written is left
    stored_r = len(list(store.generations.glob("mai-tiny-small*/R/*.parquet")))
    assert stored_r >= 1

    manifest = run(home, flow=True, limit=LIMIT, shards=1, batch_size=2, max_new_tokens=LONG)
    assert manifest["counts"]["generations_reused"] >= 2 + 2 * LIMIT  # MV1 of every sample and the stored R batch
    files = sorted(store.generations.glob("*/*/*.parquet"))
    ids = [g for f in files for g in pq.read_table(f, columns=["gen_id"]).column("gen_id").to_pylist()]
    assert len(ids) == len(set(ids)), "an identity was generated twice"
    routes = read_routes(store, manifest["run_id"])
    assert len(routes) == LIMIT and all(r["route"] in ("MV1", "MV2", "RT") for r in routes)
    used = {r[f"gen_{stage}"] for r in routes for stage in ("s_large", "s_small", "r_small", "rt_large")} - {None}
    assert used <= set(ids)
    assert verify_store(store)["problems"] == []
