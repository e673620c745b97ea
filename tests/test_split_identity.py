"""A sample is what its split says: two splits of one data folder (the built-in `shapes` and a spec benchmark's
Parquet folder) at the same `--limit` are two sets of samples, each run reads its own split's rows and computes its
own outputs, and the samples' rows name their split. A store written before the split was part of the data
fingerprint (simulated by fingerprinting the files alone, as the loader did) has its wrong-split run flagged by
`mai store verify`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mai import api
from mai.cli import main
from mai.config import config_from_mapping
from mai.evals import loading
from mai.storage.paths import Home
from mai.storage.split_check import runs_reading_another_split
from tests.helpers import BUDGET

LIMIT = 4


def run_split(home: Path, benchmark: str, split: str, **overrides: Any) -> dict[str, Any]:
    """The small model alone with the S prompt on the first LIMIT rows of `split`: the cheapest run that reads
    samples."""
    values: dict[str, Any] = {"home": str(home), "benchmark": benchmark, "split": split, "limit": LIMIT,
                              "mode": "single", "single_model": "small", "single_prompt": "S", "shards": 2,
                              "batch_size": 8, "max_new_tokens": BUDGET, **overrides}
    return api.run(config_from_mapping(values), progress=False, local=True)


def run_questions(home: Path, run_id: str) -> list[str]:
    """The questions of the samples a run's routes name, joined as every report joins them (the run's data
    fingerprint and the sample id), in row order."""
    _, rows = api.query(home, f"""
        SELECT s.question FROM routes r JOIN runs ru USING (run_id)
        JOIN samples s ON s.dataset_fingerprint = ru.dataset_fingerprint AND s.sample_id = r.sample_id
        WHERE r.run_id = '{run_id}' ORDER BY CAST(split_part(r.sample_id, '-', -1) AS INTEGER)""")
    return [str(question) for question, in rows]


def file_questions(path: Path) -> list[str]:
    return [str(q) for q in pq.read_table(path, columns=["question"]).column("question").to_pylist()[:LIMIT]]


def assert_each_run_reads_its_split(home: Path, benchmark: str, files: dict[str, Path]) -> None:
    first, second = (run_split(home, benchmark, split) for split in files)
    for manifest, (split, path) in zip((first, second), files.items(), strict=True):
        assert run_questions(home, manifest["run_id"]) == file_questions(path), split
        assert manifest["data"]["split"] == split
    assert first["data"]["fingerprint"] != second["data"]["fingerprint"]
    assert second["counts"]["generations_computed"] == LIMIT  # no other split's output stands in for its own
    _, splits = api.query(home, "SELECT DISTINCT split FROM samples ORDER BY 1")
    assert [s for s, in splits] == sorted(files)
    assert runs_reading_another_split(Home.at(home)) == []


@pytest.mark.slow
@pytest.mark.usefixtures("shapes_dataset")
def test_two_splits_of_shapes_are_two_sample_sets(home: Path) -> None:
    shapes = home / "datasets" / "shapes"
    assert file_questions(shapes / "validation-00000-of-00001.parquet") != \
        file_questions(shapes / "test-00000-of-00001.parquet")
    assert_each_run_reads_its_split(home, "shapes", {
        "validation": shapes / "validation-00000-of-00001.parquet", "test": shapes / "test-00000-of-00001.parquet"})


def two_split_spec(folder: Path) -> Path:
    """A spec benchmark over a Parquet folder in the hub's layout with two splits of different yes/no questions
    (the demo data's images: the same picture in both splits, so only the question tells the splits apart)."""
    import yaml

    demo = pq.read_table(folder.parent / "home" / "datasets" / "demo" / "test-00000-of-00001.parquet").to_pylist()
    data = folder / "data"
    data.mkdir(parents=True)
    for split, colour in (("validation", "red"), ("test", "blue")):
        rows = [{"id": str(i), "image": row["image"]["bytes"], "question": f"Is there a {colour} shape? ({i})",
                 "answer": "yes" if i % 2 else "no"} for i, row in enumerate(demo[:8])]
        pq.write_table(pa.Table.from_pylist(rows), data / f"{split}-00000-of-00001.parquet")
    spec = folder / "bench.yaml"
    spec.write_text(yaml.safe_dump({"name": "two-splits", "data": "data", "format": "parquet",
                                    "answer_kind": "yes_no"}))
    return spec


def test_two_splits_of_a_spec_benchmark_are_two_sample_sets(home: Path, tmp_path: Path) -> None:
    spec = two_split_spec(tmp_path / "bench")
    data = spec.parent / "data"
    assert_each_run_reads_its_split(home, str(spec), {
        "validation": data / "validation-00000-of-00001.parquet", "test": data / "test-00000-of-00001.parquet"})


def test_verify_flags_a_run_that_read_another_splits_samples_in_a_store_from_before(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = two_split_spec(tmp_path / "bench")
    # the loader before the split was part of the data's identity: the fingerprint named the files alone
    monkeypatch.setattr(loading, "data_fingerprint", lambda content, split, config: content)
    right = run_split(home, str(spec), "validation")
    wrong = run_split(home, str(spec), "test")
    assert wrong["counts"]["generations_computed"] == 0  # the bug as it was: the validation samples, reused
    assert run_questions(home, wrong["run_id"]) == file_questions(spec.parent / "data" /
                                                                  "validation-00000-of-00001.parquet")
    monkeypatch.undo()
    # the sample rows name their split: the mismatch is read from them
    assert [(f.run_id, f.split, f.samples_from_run_id, f.samples_split) for f in runs_reading_another_split(
        Home.at(home))] == [(wrong["run_id"], "test", None, "validation")]
    for shard in Home.at(home).table_dir("samples").rglob("*.parquet"):  # as written before the rows named their split
        pq.write_table(pq.read_table(shard).drop_columns(["split", "data_config"]), shard)
    assert [(f.run_id, f.split, f.samples_from_run_id, f.samples_split) for f in runs_reading_another_split(
        Home.at(home))] == [(wrong["run_id"], "test", right["run_id"], "validation")]
    assert main(["--home", str(home), "store", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"run {wrong['run_id']} recorded split 'test'" in out and "Traceback" not in out
    again = run_split(home, str(spec), "test")  # today's loader: the test split's own samples
    assert run_questions(home, again["run_id"]) == file_questions(spec.parent / "data" / "test-00000-of-00001.parquet")
