"""Bad input and interrupted runs: nothing is lost, nothing is duplicated. On the in-process executor (`mai run
--local`): what a killed run left in the store is the subject, and every executor stores the same
(tests/test_executors.py; tests/test_sigterm.py stops the flow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from mai.storage.catalog import query
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from tests.helpers import BUDGET, run


def write_demo_copy_with_bad_rows(home: Path) -> Path:
    """The demo's first rows in the hub schema, plus a corrupt image and a row without a question."""
    import datasets

    source = Home.at(home).datasets / "demo" / "test-00000-of-00001.parquet"
    rows = pq.read_table(source).slice(0, 10).to_pylist()
    rows[3]["image"] = {"bytes": b"\x89PNG\r\n\x1a\n this is not an image", "path": None}
    rows[6]["question"] = None
    target = home / "bad-copy" / "test-00000-of-00001.parquet"
    target.parent.mkdir(parents=True)
    features = datasets.Dataset.from_parquet(str(source)).features
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(target))
    return target.parent


def test_corrupt_and_incomplete_rows_are_recorded_and_the_run_completes(home: Path) -> None:
    data = write_demo_copy_with_bad_rows(home)
    manifest = run(home, data=str(data), limit=None)
    assert manifest["counts"] == {**manifest["counts"], "samples": 10, "valid": 8, "errors": 2}
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), manifest["run_id"])}
    assert routes["demo-3"]["route"] == "ERROR" and "cannot be decoded" in routes["demo-3"]["error"]
    assert routes["demo-6"]["route"] == "ERROR" and "'question'" in routes["demo-6"]["error"]
    assert sum(r["route"] in ("MV1", "MV2", "RT") for r in routes.values()) == 8
    _, rows = query(Home.at(home), "SELECT sample_id, error FROM samples WHERE error IS NOT NULL ORDER BY 1")
    assert [r[0] for r in rows] == ["demo-3", "demo-6"]


def test_a_run_killed_mid_stage_completes_on_rerun_without_duplicates(home: Path) -> None:
    # long reasoning so that the kill lands inside the R stage: 24 samples on 2 shards at batch 4 give the first
    # shard 3 R batches of about 0.25 s each and the run 3 s more after the second one is stored
    budget = {**BUDGET, "R": 160}
    command = [sys.executable, "-m", "mai.cli", "--home", str(home), "run", "--local", "--limit", "24",
               "--shards", "2", "--batch-size", "4", *[f"--max-new-tokens={k}={v}" for k, v in budget.items()]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if len(list(Home.at(home).generations.glob("mai-tiny-small*/R/*.parquet"))) >= 2:
                break
            time.sleep(0.2)
        assert process.poll() is None, "the run finished before it could be killed: raise the R budget"
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert not list(Home.at(home).runs.glob("*/run.parquet"))  # no manifest: the run did not complete

    manifest = run(home, limit=24, batch_size=4, max_new_tokens=budget)
    assert manifest["counts"]["generations_reused"] > 0  # what the killed run stored is not recomputed
    files = sorted(Home.at(home).generations.glob("*/*/*.parquet"))
    ids = [g for f in files for g in pq.read_table(f, columns=["gen_id"]).column("gen_id").to_pylist()]
    assert len(ids) == len(set(ids)), "an identity was generated twice"
    routes = read_routes(Home.at(home), manifest["run_id"])
    assert len(routes) == 24
    assert all(r["route"] in ("MV1", "MV2", "RT") and r["final_gen_id"] in set(ids) for r in routes)
    used = {r[f"gen_{stage}"] for r in routes for stage in ("s_large", "s_small", "r_small", "rt_large")}
    assert used - {None} <= set(ids)
