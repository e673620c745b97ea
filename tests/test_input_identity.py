"""A result is what its inputs are (issue 59): a sample set is identified by every file its rows read, images named
by path included, so an image replaced in place (same path, new bytes) is read again and gives its sample a new
content hash, in a JSONL, a Parquet file with paths and a hub-layout folder with an image column of paths; an
image that was missing and appears is read too. A split reads exactly its files (`test` is not `test-hard`), data
that names no splits refuses another `--split`, and only the command line widens where a spec may read."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mai import api
from mai.config import config_from_mapping
from mai.errors import ConfigError
from mai.evals.files_read import FileRead, files_digest
from mai.evals.loading import DEFAULT_MAX_IMAGE_PIXELS
from mai.evals.spec import load_spec
from mai.pipeline import Materialised
from mai.storage.materialise import FILES_READ, materialise_samples
from mai.storage.paths import Home
from mai.storage.samples import read_shard
from mai.types import Sample
from tests.helpers import BUDGET
from tests.test_benchmark_specs import COLOURS, png, write_spec

LOG = logging.getLogger("mai")
NAMES = ["red", "green", "blue", "yellow"]


def question_rows(image: str = "images/{name}.png") -> list[dict[str, Any]]:
    return [{"id": f"q{i}", "picture": image.format(name=name), "question": f"Is the square {name}?",
             "answer": "yes"} for i, name in enumerate(NAMES)]


def write_images(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        (folder / f"{name}.png").write_bytes(png(COLOURS[name]))


def jsonl_spec(folder: Path) -> Path:
    write_images(folder / "images")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in question_rows()))
    return write_spec(folder, name="paths-jsonl", data="rows.jsonl", format="jsonl", answer_kind="yes_no",
                      columns={"id": "id", "image": "picture"})


def parquet_spec(folder: Path) -> Path:
    write_images(folder / "images")
    pq.write_table(pa.Table.from_pylist(question_rows()), folder / "rows.parquet")
    return write_spec(folder, name="paths-parquet", data="rows.parquet", format="parquet", answer_kind="yes_no",
                      columns={"id": "id", "image": "picture"})


def hub_folder_spec(folder: Path) -> Path:
    """The hub's Parquet layout (`data/test-00000-of-00001.parquet`) whose image column is the hub's Image layout
    with a path and no bytes, relative to the data folder and outside it (`../images`)."""
    write_images(folder / "images")
    rows = [{**r, "picture": {"bytes": None, "path": r["picture"]}} for r in question_rows("../images/{name}.png")]
    (folder / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "test-00000-of-00001.parquet")
    return write_spec(folder, name="paths-hub", data="data", format="parquet", answer_kind="yes_no",
                      columns={"id": "id", "image": "picture"})


def materialise(home: Path, spec: Path, limit: int | None = None, **values: Any) -> Materialised:
    config = config_from_mapping({"home": str(home), "benchmark": str(spec), "mode": "single",
                                  "single_model": "small", **values})
    plan = api.plan_run(config)
    return materialise_samples(Home.at(home), plan.benchmark, plan.source, 1, limit, DEFAULT_MAX_IMAGE_PIXELS, LOG)


def samples_of(home: Path, materialised: Materialised) -> dict[str, Sample]:
    return {s.sample_id: s for path in materialised.shard_paths for s in read_shard(home / path)}


def replace_in_place(path: Path, content: bytes) -> None:
    """New bytes at the same path, with the size and times it had: only the content tells them apart."""
    stat = path.stat()
    path.write_bytes(content)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("make_spec", [jsonl_spec, parquet_spec, hub_folder_spec], ids=["jsonl", "parquet", "hub"])
def test_an_image_replaced_in_place_is_read_again(home: Path, tmp_path: Path, make_spec: Any,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    spec = make_spec(tmp_path / "bench")
    first = materialise(home, spec)
    before = samples_of(home, first)
    assert all(s.error is None for s in before.values()), [s.error for s in before.values()]
    assert first.source.files_read and first.source.fingerprint != first.source.rows_fingerprint
    with caplog.at_level(logging.INFO, logger="mai"):
        again = materialise(home, spec)  # nothing changed: the same set, the same identity, nothing read
    assert again == first
    (reused,) = [r.getMessage() for r in caplog.records if "samples of" in r.getMessage()]
    assert reused.endswith(f"({first.source.rows_fingerprint}) already materialised in "
                           f"{first.shard_paths[0].split('/')[3]}")

    image = tmp_path / "bench" / "images" / "red.png"
    replace_in_place(image, png(COLOURS["blue"]))
    changed = materialise(home, spec)
    after = samples_of(home, changed)
    assert changed.source.rows_fingerprint == first.source.rows_fingerprint  # the data files did not change
    assert changed.source.fingerprint != first.source.fingerprint
    red = next(sid for sid in before if sid.endswith("q0"))
    assert after[red].image_sha256 != before[red].image_sha256
    assert after[red].content_hash != before[red].content_hash  # so its every output is computed again
    assert {sid: s.content_hash for sid, s in after.items() if sid != red} == \
        {sid: s.content_hash for sid, s in before.items() if sid != red}

    image.write_bytes(png(COLOURS["red"]))  # back to the first bytes: the first set again
    assert materialise(home, spec).source == first.source


def test_a_missing_image_that_appears_is_read(home: Path, tmp_path: Path) -> None:
    spec = jsonl_spec(tmp_path / "bench")
    (tmp_path / "bench" / "images" / "green.png").unlink()
    first = samples_of(home, materialise(home, spec))
    assert "cannot be read" in (first["paths-jsonl-q1"].error or "")
    (tmp_path / "bench" / "images" / "green.png").write_bytes(png(COLOURS["green"]))
    assert samples_of(home, materialise(home, spec))["paths-jsonl-q1"].error is None


def test_a_slice_has_one_identity_however_it_was_read(home: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """`--limit 2` cut from the whole set stored before names the files of its two rows, as reading them would."""
    folder = tmp_path / "bench"
    spec = jsonl_spec(folder)
    materialise(home, spec)
    with caplog.at_level(logging.INFO, logger="mai"):
        cut = materialise(home, spec, limit=2)
    assert any("read from a larger slice the store holds" in r.getMessage() for r in caplog.records)
    record = json.loads(next((Home.at(home).table_dir("samples") / "paths-jsonl").glob(f"*-all-*/{FILES_READ}"))
                        .read_text())
    assert len(record["files"]) == 4
    two_rows = [FileRead(f"images/{name}.png", hashlib.sha256(png(COLOURS[name])).hexdigest(), row)
                for row, name in enumerate(NAMES[:2])]
    assert cut.source.files_read == files_digest(two_rows)  # what reading the two rows records
    replace_in_place(folder / "images" / "blue.png", png(COLOURS["red"]))  # row 2: outside the slice
    assert materialise(home, spec, limit=2).source == cut.source


def test_a_split_reads_exactly_its_files(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    write_images(folder / "images")
    data = folder / "data"
    data.mkdir()
    rows = question_rows("../images/{name}.png")
    pq.write_table(pa.Table.from_pylist(rows[:2]), data / "test-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(rows[2:]), data / "test-hard-00000-of-00001.parquet")
    spec = write_spec(folder, name="split-exact", data="data", format="parquet", answer_kind="yes_no",
                      columns={"id": "id", "image": "picture"}, split="test")
    assert sorted(samples_of(home, materialise(home, spec))) == ["split-exact-q0", "split-exact-q1"]
    assert sorted(samples_of(home, materialise(home, spec, split="test-hard"))) == ["split-exact-q2",
                                                                                     "split-exact-q3"]


def test_data_with_no_splits_refuses_another_split(home: Path, tmp_path: Path) -> None:
    spec = jsonl_spec(tmp_path / "bench")
    with pytest.raises(ConfigError, match=r"names no splits: it is one split, read as 'test'; leave --split out"):
        materialise(home, spec, split="validation")
    assert materialise(home, spec, split="test").source.split == "test"


def test_only_the_command_line_widens_where_a_spec_reads(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    jsonl_spec(folder)
    wide = write_spec(folder, name="wide", data="rows.jsonl", format="jsonl", answer_kind="yes_no", data_root="/",
                      columns={"id": "id", "image": "picture"})
    with pytest.raises(ConfigError, match=r"data_root '/' is /, outside the spec's folder .*: a spec cannot widen "
                                          r"where it reads; allow it on the command line with --data-root /$"):
        load_spec(wide)
    with pytest.raises(ConfigError, match="--data-root /"):
        config_from_mapping({"benchmark": str(wide)})
    assert load_spec(wide, data_root="/").data_root == "/"
    assert config_from_mapping({"benchmark": str(wide), "data_root": "/"}).benchmark_spec is not None
    narrow = write_spec(folder, name="narrow", data="rows.jsonl", format="jsonl", answer_kind="yes_no",
                        data_root=".", columns={"id": "id", "image": "picture"})
    assert load_spec(narrow).data_root == str(folder.resolve())  # inside its own folder: the spec's to choose


def test_a_run_recomputes_the_sample_whose_image_was_replaced(home: Path, tmp_path: Path) -> None:
    spec = jsonl_spec(tmp_path / "bench")
    values = {"home": str(home), "benchmark": str(spec), "mode": "single", "single_model": "small",
              "single_prompt": "S", "shards": 1, "batch_size": 8, "max_new_tokens": BUDGET}
    first = api.run(config_from_mapping(values), progress=False, local=True)
    assert first["counts"]["generations_computed"] == 4
    replace_in_place(tmp_path / "bench" / "images" / "red.png", png(COLOURS["blue"]))
    second = api.run(config_from_mapping(values), progress=False, local=True)
    assert (second["counts"]["generations_computed"], second["counts"]["generations_reused"]) == (1, 3)
    assert second["data"]["fingerprint"] != first["data"]["fingerprint"]
    _, rows = api.query(home, "SELECT run_id, split, dataset_fingerprint FROM runs ORDER BY started_at")
    assert [(r[1], r[2]) for r in rows] == [("test", first["data"]["fingerprint"]),
                                            ("test", second["data"]["fingerprint"])]
