"""Compaction of the store: under concurrent writers and readers, under SIGKILL, and over a real store's saved
queries. Real Parquet files, real DuckDB, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mai.storage.catalog import query
from mai.storage.maintenance import compact_store, store_stats
from mai.storage.partitions import Partition, compact, partitions, write_part
from mai.storage.paths import Home
from mai.storage.tables import CONTENT_ADDRESSED
from mai.storage.verify import verify_store
from tests.helpers import BUDGET, run

REPO = Path(__file__).resolve().parents[1]
GENERATIONS_TABLE = CONTENT_ADDRESSED[0]


def rows(prefix: str, count: int, text: str = "step " * 40) -> list[dict[str, Any]]:
    """Generation rows in the real schema (what a batch of a stage writes)."""
    now = datetime.now(UTC)
    return [{"gen_id": f"{prefix}-{i:06d}", "sample_id": f"s{i}", "benchmark": "demo", "model": "m",
             "model_revision": "r", "dtype": "float32", "prompt_kind": "R", "template": "R-v1", "upstream_gen_id": None,
             "max_new_tokens": 64, "min_new_tokens": 0, "prompt_text": "q", "text": text, "output_token_ids": [1, 2],
             "answer_span": None, "prompt_tokens": 10, "output_tokens": 2, "finish_reason": "stop", "ttft_s": 0.1,
             "decode_s": 0.2, "wall_s": 0.3, "batch_size": 8, "backend": "transformers", "run_id": prefix,
             "created_at": now, "cached_prompt_tokens": None} for i in range(count)]


def partition_of(home: Home) -> Partition:
    return Partition(home, home.generations / "m@r-float32" / "R")


def stored_ids(home: Home) -> Counter[str]:
    """Every gen_id in the published files (duplicates counted), read file by file, not through a view."""
    files = partition_of(home).files()
    return Counter(g for f in files for g in pq.read_table(f, columns=["gen_id"]).column(0).to_pylist())


WRITER = """
import sys
from pathlib import Path
from mai.storage.paths import Home
from mai.storage.partitions import write_part
from tests.test_store_compaction import rows
home, batches, size, prefix = Home.at(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
until = Path(sys.argv[5]) if len(sys.argv) > 5 else None  # past `batches`, until this file exists (20 x at most)
directory = home.generations / "m@r-float32" / "R"
written = 0
while written < batches or (until is not None and not until.exists() and written < 20 * batches):
    write_part(home, directory, rows(f"{prefix}{written:05d}", size), "generations")
    written += 1
print(written, flush=True)
"""


def write_batches(home: Home, batches: int, size: int, prefix: str, until: Path | None = None
                  ) -> subprocess.Popen[bytes]:
    """A process writing `batches` batch files of `size` rows, and more until the file `until` exists; it prints
    how many it wrote."""
    return subprocess.Popen([sys.executable, "-c", WRITER, str(home.root), str(batches), str(size), prefix,
                             *([str(until)] if until else [])], cwd=REPO, stdout=subprocess.PIPE)


def test_compaction_while_a_writer_appends_and_a_reader_queries(tmp_path: Path) -> None:
    home = Home.at(tmp_path)
    write_part(home, partition_of(home).path, rows("seed", 8), "generations")
    # the writer goes on until compaction has overlapped it three times: on a loaded machine its 400 batches alone
    # were written before that
    enough = tmp_path / "compacted-three-times"
    writer = write_batches(home, 400, 8, "w", until=enough)
    failures: list[str] = []
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                _, result = query(home, "SELECT count(*), count(DISTINCT gen_id) FROM generations")
                seen.append(result[0])  # type: ignore[arg-type]
            except Exception as error:  # noqa: BLE001  (any failed query is what this test must never see)
                failures.append(repr(error))

    reader = threading.Thread(target=read)
    reader.start()
    compactions = 0
    try:
        while writer.poll() is None:
            report = compact(partition_of(home), GENERATIONS_TABLE, min_small_files=2, grace_s=5.0)
            compactions += not report.skipped
            if compactions >= 3:
                enough.touch()
            time.sleep(0.05)
    finally:
        enough.touch()
        out = writer.communicate(timeout=300)[0]
        stop.set()
        reader.join(timeout=60)
    assert writer.returncode == 0
    written = int(out)
    assert failures == []
    assert compactions >= 3, "compaction never overlapped the writer"
    # every published version a reader saw held each identity once, and no row ever went missing
    assert seen and all(total == distinct for total, distinct in seen), [s for s in seen if s[0] != s[1]][:5]
    counts = [distinct for _, distinct in seen]
    assert counts == sorted(counts)
    compact(partition_of(home), GENERATIONS_TABLE, min_small_files=2)
    ids = stored_ids(home)
    assert written >= 400 and len(ids) == 8 + written * 8 and set(ids.values()) == {1}
    assert len(partition_of(home).files()) == 1


COMPACTOR = """
import sys
from mai.storage.paths import Home
from mai.storage.maintenance import compact_store
compact_store(Home.at(sys.argv[1]), min_small_files=2, grace_s=0.0)
"""


@pytest.mark.slow
def test_sigkill_during_compaction_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    home = Home.at(tmp_path)
    written, landed = 0, 0
    for attempt, delay in enumerate((0.3, 0.6, 0.9, 1.2, 1.6)):
        writer = write_batches(home, 300, 8, f"k{attempt}-")
        assert writer.wait(timeout=300) == 0
        written += 300 * 8
        compactor = subprocess.Popen([sys.executable, "-c", COMPACTOR, str(home.root)], cwd=REPO)
        time.sleep(delay)
        if compactor.poll() is None:
            landed += 1
        compactor.send_signal(signal.SIGKILL)
        compactor.wait(timeout=60)
        # readable, nothing lost, nothing twice: whatever version is published is whole
        _, result = query(home, "SELECT count(*), count(DISTINCT gen_id) FROM generations")
        assert result == [(written, written)]
    assert landed >= 3, "the kills did not land inside compactions: raise the batch count"
    reports = compact_store(home, min_small_files=2, grace_s=0.0)
    assert [r.skipped for r in reports] == [""]
    ids = stored_ids(home)
    assert len(ids) == written and set(ids.values()) == {1}
    assert verify_store(home)["problems"] == []
    # the versions that were killed before being published, and the retired ones, are gone
    assert [v.name for v in partition_of(home).versions.glob("v*")] == [partition_of(home).current().name]  # type: ignore[union-attr]


def test_duplicates_and_orphans_are_reported_then_removed(tmp_path: Path) -> None:
    from mai.cli import main

    home = Home.at(tmp_path)
    directory = partition_of(home).path
    write_part(home, directory, rows("a", 5), "generations")
    time.sleep(0.01)
    write_part(home, directory, rows("a", 3, text="later copy"), "generations")  # a-000000..2 twice
    orphan = Path(partition_of(home).current()) / ".tmp-dead-writer.parquet.partial"  # type: ignore[arg-type]
    orphan.write_bytes(b"half a file")
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    problems = verify_store(home)["problems"]
    assert any("3 identities stored more than once" in p for p in problems)
    assert any("dead-writer" in p for p in problems)
    assert main(["--home", str(home.root), "store", "verify"]) == 1
    [report] = compact_store(home)
    assert report.duplicates_removed == 3 and report.files_after == 1
    _, texts = query(home, "SELECT DISTINCT text FROM generations WHERE gen_id = 'a-000001'")
    assert texts == [("step " * 40,)]  # the first-written copy is kept
    orphan.unlink()
    assert main(["--home", str(home.root), "store", "verify"]) == 0


def test_a_compacted_real_store_answers_every_saved_query_as_before(home: Path) -> None:
    from mai import api
    from mai.config import RunConfig, sweep_variants
    from mai.dashboards.saved import list_saved, load_saved

    # 12 samples in batches of 2: files enough to compact (several a partition), at half the runs' cost of 24
    small_batches = {"batch_size": 2, "limit": 12}
    run(home, **small_batches)
    run(home, s2=True, **small_batches)
    run(home, mode="full_rt", **small_batches)
    run(home, mode="single", single_model="large", single_prompt="R", **small_batches)
    for variant in sweep_variants(RunConfig(home=str(home), limit=12, shards=2, batch_size=2, max_new_tokens=BUDGET),
                                  [1, 2]):  # the runs of `mai sweep --layers 1,2`
        api.run(variant, progress=False, local=True)
    store = Home.at(home)

    def rounded(row: tuple[Any, ...]) -> tuple[Any, ...]:  # sums over other file orders differ in the last bit
        return tuple(round(v, 9) if isinstance(v, float) else v for v in row)

    def answers() -> dict[str, list[tuple[Any, ...]]]:
        return {name: sorted((rounded(r) for r in query(store, load_saved(name))[1]), key=repr)
                for name, _ in list_saved()}

    before, files_before = answers(), {s.table: s.files for s in store_stats(store)}
    reports = compact_store(store)
    after, files_after = answers(), {s.table: s.files for s in store_stats(store)}
    assert after == before
    assert files_after["generations"] < files_before["generations"]
    assert files_after["generations"] == len(partitions(store, GENERATIONS_TABLE))
    assert sum(r.duplicates_removed for r in reports) == 0  # claims: no run generated an identity twice
    assert verify_store(store)["problems"] == []


@pytest.mark.parametrize("table", CONTENT_ADDRESSED, ids=lambda t: t.name)
def test_every_table_has_an_id_and_a_schema(table: Any) -> None:
    assert set(table.key) <= set(table.schema.names) and "created_at" in table.schema.names


def test_tiered_compaction_bounds_files_and_rewrites() -> None:
    """The end-of-run policy over 400 runs of 64 batch files of 8 rows (204,800 rows): the partition never
    holds more than a few files per size tier, and a row is rewritten about once per tier, not once per run."""
    from mai.storage.partitions import _tiered_choice

    files: dict[Path, int] = {}
    rewritten = written = most_files = 0
    for run_index in range(400):
        for batch in range(64):
            files[Path(f"part-{run_index}-{batch}")] = 8
            written += 8
        chosen = _tiered_choice(sorted(files), files)
        assert len(chosen) >= 64  # every run's batch files are merged
        merged = sum(files.pop(f) for f in chosen)
        files[Path(f"compacted-{run_index}")] = merged
        rewritten += merged
        most_files = max(most_files, len(files))
    assert sum(files.values()) == written
    assert most_files <= 4 * 9  # under 4 files in each of the ~9 tiers up to 250k rows
    assert rewritten / written <= 9  # log4(204,800 / 8) ~ 7.3 tiers above the batch files
