"""Rows that cannot run become recorded per-sample errors and the run goes on: a megabyte question (it built a
~1 M-token prompt whose attention mask killed the run; refused by the prompt-length check before generation) and a
question that is not valid UTF-8 (pyarrow refused the whole file at materialisation). Real loader (`datasets` over Parquet), real tiny models, the in-process executor."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mai.evals.demo import DemoBenchmark
from mai.evals.loading import DataSource, load_dataset_rows, rows_to_samples
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from tests.helpers import run


def unchecked_strings(values: list[bytes]) -> pa.Array:
    """A Parquet string column holding any bytes: pyarrow checks UTF-8 when a column is built from Python text,
    not when it is built from buffers (a file written by another tool can hold anything)."""
    offsets = [0]
    for value in values:
        offsets.append(offsets[-1] + len(value))
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]),
                                       pa.py_buffer(b"".join(values)))


def hostile_copy(home: Path, rows: int = 12) -> Path:
    """The demo's first rows with row 1's question a megabyte long and row 2's not UTF-8, schema and hub feature
    metadata kept (the file loads through the same path as a real benchmark's copy), in a folder named `hostile [1]`."""
    source = Home.at(home).datasets / "demo" / "test-00000-of-00001.parquet"
    table = pq.read_table(source).slice(0, rows)
    questions = [q.encode() for q in table.column("question").to_pylist()]
    questions[1] = b"How many shapes? " + b"x" * 1_000_000
    questions[2] = b"Which colour \xff\xfe is it?"
    table = table.set_column(table.schema.get_field_index("question"), table.schema.field("question"),
                             unchecked_strings(questions))
    # under a name `datasets` would read as a glob (`[1]` is the class of '1'), beside what that glob matches
    target = home / "hostile [1]" / "test-00000-of-00001.parquet"
    target.parent.mkdir(parents=True)
    (home / "hostile 1").mkdir()
    pq.write_table(pq.read_table(source).slice(0, 2), home / "hostile 1" / "test-00000-of-00001.parquet")
    pq.write_table(table, target)
    return target.parent


def test_rows_that_cannot_run_are_errors_when_read(home: Path) -> None:
    data = hostile_copy(home)
    _columns, rows = load_dataset_rows(DataSource(str(data), "test", None, None, "x"), ("image",))
    samples = rows_to_samples(DemoBenchmark(), rows, lambda encoded: ("img", "sha"))
    assert len(samples) == 12
    errors = {s.sample_id: s.error for s in samples if s.error is not None}
    assert set(errors) == {"demo-2"}, errors
    assert "'question'" in (errors["demo-2"] or "") and "not valid UTF-8" in (errors["demo-2"] or "")
    # a long question is read whole: whether its prompt fits is decided in tokens, per model, before generation
    # (mai/run/prompt_limits.py; tests/test_hardening_prompt_length.py)
    assert len(next(s for s in samples if s.sample_id == "demo-1").question) > 1_000_000


def test_a_run_over_a_megabyte_question_and_a_non_utf8_question_completes(home: Path) -> None:
    clean = run(home, limit=12)
    manifest = run(home, data=str(hostile_copy(home)), limit=None)
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), manifest["run_id"])}
    assert routes["demo-1"]["route"] == "ERROR" and "the model's context" in routes["demo-1"]["error"]
    assert routes["demo-2"]["route"] == "ERROR" and "UTF-8" in routes["demo-2"]["error"]
    assert manifest["counts"]["errors"] == 2 and manifest["counts"]["valid"] == 10
    before = {r["sample_id"]: (r["route"], r["final_answer"]) for r in read_routes(Home.at(home), clean["run_id"])}
    after = {sid: (r["route"], r["final_answer"]) for sid, r in routes.items() if r["route"] != "ERROR"}
    assert after == {sid: before[sid] for sid in after}  # the other rows answer as in a clean run
