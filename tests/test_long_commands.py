"""Long commands keep what they did and say how far they are: `mai speculative` writes its rows every batch of
samples (a kill keeps them, the same call again measures only the rest, into the same reference run), and
`mai speculative` / `mai profile` report progress (mai.progress events, which the terminal's bar shows)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mai import progress
from mai.cli import main
from mai.config import RunConfig
from mai.flows.speculative import mai_speculative
from mai.run.speculative import stored_rows
from mai.storage.catalog import query
from mai.storage.paths import Home
from tests.helpers import BUDGET

pytestmark = pytest.mark.prefect

SPEC_BUDGET = {**BUDGET, "R": 48}


class Events:
    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.done: dict[str, int] = {}

    def stage_started(self, stage: str, total: int) -> None:
        self.started[stage] = self.started.get(stage, 0) + total

    def advanced(self, stage: str, done: int) -> None:
        self.done[stage] = self.done.get(stage, 0) + done


def test_speculative_keeps_its_batches_when_killed_and_resumes(home: Path) -> None:
    command = [sys.executable, "-m", "mai.cli", "--home", str(home), "speculative", "--limit", "4", "--shards",
               "1", "--batch-size", "1", *[f"--max-new-tokens={k}={v}" for k, v in SPEC_BUDGET.items()]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store = Home.at(home)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if list(store.table_dir("speculative").glob("*/k4-*.parquet")):
                break
            time.sleep(0.05)
        assert process.poll() is None, "speculative decoding finished before it could be killed"
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    [directory] = list(store.table_dir("speculative").glob("*"))
    kept = {r["sample_id"] for r in stored_rows(directory, 4)}
    assert 1 <= len(kept) < 4  # rows are written every batch, so a kill keeps the batches before it

    events = Events()
    progress.add_listener(events)
    try:
        summary = mai_speculative(RunConfig(home=str(home), limit=4, shards=1, batch_size=1,
                                            max_new_tokens=SPEC_BUDGET))
    finally:
        progress.remove_listener(events)
    assert summary["run_id"] == directory.name and summary["samples"] == 4 and summary["identical"] == 4
    assert events.started["speculative"] == events.done["speculative"] == 4 - len(kept)  # only the rest
    rows = stored_rows(directory, 4)
    assert sorted(r["sample_id"] for r in rows) == sorted({r["sample_id"] for r in rows})  # each sample once
    assert kept <= {r["sample_id"] for r in rows}
    _, counted = query(store, "SELECT count(*), count(DISTINCT sample_id), count(DISTINCT run_id) FROM speculative")
    assert counted == [(4, 4, 1)]
    _, runs = query(store, "SELECT count(*) FROM runs")
    assert runs == [(1,)]  # the interrupted call's reference run is resumed, not run again


def test_profile_and_speculative_report_progress(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "profile", "mai-tiny-small", "--name", "tiny", "--resolutions", "64",
                 "--query-tokens", "8,16", "--output-tokens", "4", "--repeats", "1"]) == 0
    err = capsys.readouterr().err
    assert "profile" in err and "12/12" in err  # 2 points x 3 timed calls x (1 + 1 warm-up)
    assert main(["--home", str(home), "speculative", "--limit", "3", "--shards", "1",
                 *[f"--max-new-tokens={k}={v}" for k, v in BUDGET.items()]]) == 0
    err = capsys.readouterr().err
    assert "speculative" in err and "3/3" in err
