"""A damaged or missing file costs its rows, never the store (storage/damage.py, storage/health.py), and `mai store
verify` finds every kind of damage and `--repair` moves it aside (storage/verify.py).

One real store is built per module (the demo's cascade with S2, a sparse-RT run, an estimate of each); each case
works on a copy with one file of one table truncated, overwritten with garbage or deleted, and runs the commands a
user would through `mai`'s own entry point (in this process: each command's output, a forked `mai sql` worker's
included, is read from the file descriptors); the runs compute on the in-process executor. Besides the tables' files: an image asset a sample names
(storage/image_assets.py), a run's manifest.json, and a partition folder (its place taken by a file, or removed)."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq
import pytest

from mai import api
from mai.cli import main
from mai.config import RunConfig, shapes_pair_config

# the module's fixtures build stores of many runs: the full suite's, not the fast tier's
pytestmark = pytest.mark.slow

LIMIT = 16
LAYER = 1
PROFILES = ("--small-profile", "h100-2b", "--large-profile", "h100-8b")
REPO = Path(__file__).resolve().parents[1]
Kind = Literal["samples", "generations", "attention", "selections", "runs", "routes", "metrics", "scores",
               "estimates", "catalog", "images", "manifest", "partition"]
Damage = Literal["truncate", "garbage", "delete"]
KINDS: tuple[Kind, ...] = ("samples", "generations", "attention", "selections", "runs", "routes", "metrics",
                           "scores", "estimates", "catalog", "images", "manifest", "partition")
DAMAGES: tuple[Damage, ...] = ("truncate", "garbage", "delete")
SHARED = ("models", "datasets", "images")  # read-only for these cases: linked into each copy, not copied


def demo_config(home: Path) -> RunConfig:
    return shapes_pair_config(home=str(home), limit=LIMIT, s2=True, run_name="demo")


def sparse_config(home: Path) -> RunConfig:
    return shapes_pair_config(home=str(home), limit=LIMIT, transfer="sparse", transfer_layer=LAYER)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, assets_home: Path, shapes_dataset: Path) -> dict[str, str]:
    """The module's store: run ids of the demo (A, estimated) and the sparse run (B), and its root (`home`)."""
    from tests.helpers import link_shapes

    root = tmp_path_factory.mktemp("damage") / "home"
    shutil.copytree(assets_home / "models", root / "models")
    link_shapes(shapes_dataset, root)
    a = api.run(demo_config(root), progress=False, local=True)["run_id"]
    b = api.run(sparse_config(root), progress=False, local=True)["run_id"]
    csv = REPO / "docs" / "paper_latency_h100.csv"
    api.import_profile(csv, "h100-2b", model="Qwen3-VL-2B", home=root)
    api.import_profile(csv, "h100-8b", model="Qwen3-VL-8B", home=root)
    api.estimate(a, small_profile="h100-2b", large_profile="h100-8b", home=root)
    return {"home": str(root), "a": a, "b": b}


def copy_store(base: dict[str, str], destination: Path, kind: Kind | None = None) -> Path:
    """A copy of the module's store (partition links are relative: they stay inside the copy); the images are the
    copy's own where a case damages one."""
    source = Path(base["home"])
    destination.mkdir()
    for entry in source.iterdir():
        if entry.name in SHARED and not (kind == "images" and entry.name == "images"):
            (destination / entry.name).symlink_to(entry)
        elif entry.is_dir():
            shutil.copytree(entry, destination / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, destination / entry.name)
    return destination


def target(home: Path, kind: Kind, run_id: str) -> Path:
    """The file of `kind` that a case damages: one the demo run (A) reads, where the kind has one."""
    store = home / "store"
    found = {
        "samples": lambda: sorted(store.glob("samples/shapes/*/shard-00001.parquet")),
        "generations": lambda: sorted(store.glob("generations/mai-shapes-small*/R/*.parquet")),
        "attention": lambda: sorted(store.glob("attention/*/*.parquet")),
        "selections": lambda: sorted(store.glob("selections/*/*.parquet")),
        "runs": lambda: [store / "runs" / run_id / "run.parquet"],
        "routes": lambda: [store / "routes" / run_id / "routes.parquet"],
        "metrics": lambda: sorted((store / "metrics" / run_id).glob("*.parquet")),
        "scores": lambda: sorted((store / "scores" / run_id).glob("*.parquet")),
        "estimates": lambda: sorted((store / "estimates" / run_id).glob("*.parquet")),
        "catalog": lambda: [home / "catalog.duckdb"],
        "images": lambda: [image_of(home, first_sample(home, run_id)["image_sha256"][0])],
        "manifest": lambda: [store / "runs" / run_id / "manifest.json"],
        "partition": lambda: sorted(store.glob("generations/mai-shapes-small*/R")),
    }[kind]()
    assert found and found[0].exists(), kind
    if kind == "partition":
        return found[0]  # the partition's folder (a link to its current version), as a writer names it
    return found[0].resolve()  # a partition's file by its version path, as every listing names it


def first_sample(home: Path, run_id: str) -> dict[str, Any]:
    """The first sample of the run's first shard whose image no other sample of the run names."""
    manifest = json.loads((home / "store" / "runs" / run_id / "manifest.json").read_text())
    rows = [row for shard in manifest["shard_paths"] for row in pq.read_table(home / shard).to_pylist()]
    named = Counter(digest for row in rows for digest in row["image_sha256"])
    return next(r for r in rows if r["error"] is None and all(named[d] == 1 for d in r["image_sha256"]))


def image_of(home: Path, digest: str) -> Path:
    return home / "images" / digest[:2] / digest


def damage(path: Path, how: Damage) -> None:
    """A file truncated to 100 bytes, overwritten with garbage of its size, or deleted; a folder (a partition's
    link to its version) removed, and for truncate and garbage a file put in its place."""
    if path.is_symlink() or path.is_dir():
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path)
        if how != "delete":
            path.write_bytes(b"" if how == "truncate" else random.Random(50).randbytes(4096))
    elif how == "truncate":
        os.truncate(path, 100)
    elif how == "garbage":
        path.write_bytes(random.Random(50).randbytes(path.stat().st_size))
    else:
        path.unlink()


def mai(home: Path, capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capfd.readouterr()
    rc = main(["--home", str(home), *argv])
    out, err = capfd.readouterr()
    return rc, out, err


def assert_works_or_names(path: Path, rc: int, out: str, err: str) -> None:
    """rc 0, or one line on stderr that names the file (or, for a lost run file, its run's directory)."""
    assert "Traceback" not in out + err, out + err
    if rc != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert str(path) in lines[0] or str(path.parent) in lines[0], lines[0]


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_query_works_around_a_damaged_file_or_names_it(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: Kind, how: Damage) -> None:
    """The quick commands, on every kind and damage: `mai sql` (alone and over the table), `mai store stats`,
    `mai compare`, then `mai store verify`, which names a damaged file as a problem."""
    home = copy_store(base, tmp_path / "home", kind)
    path = target(home, kind, base["a"])
    damage(path, how)
    view = {"catalog": "runs", "manifest": "runs", "images": "samples", "partition": "generations"}.get(kind, kind)
    for argv in [("sql", "SELECT 1"), ("sql", f"SELECT count(*) FROM {view}"), ("store", "stats"),
                 ("compare", base["a"], base["b"])]:
        assert_works_or_names(path, *mai(home, capfd, *argv))
    rc, out, err = mai(home, capfd, "store", "verify")
    assert "Traceback" not in out + err and rc in (0, 1), out + err
    if kind == "images":  # deleted too: an image a sample names
        assert rc == 1 and f"problem: {path}: {'missing' if how == 'delete' else 'unreadable (damaged'}" in out, out
    elif kind == "partition":  # a file in its place; removed, the routes that name its rows dangle
        assert rc == 1 and (how == "delete" or f"problem: {path}: not a folder: a file is in its place" in out), out
    elif how != "delete":
        assert rc == 1 and (f"problem: {path}: unreadable" in out or kind == "catalog"), out
        assert kind != "catalog" or f"problem: {path}: {'truncated' if how == 'truncate' else 'not a DuckDB'}" in out


# the slow commands (the report, a re-run) on each kind under one damage, and the other damages under repair below
SLOW: tuple[tuple[Kind, Damage], ...] = (
    ("samples", "delete"), ("generations", "garbage"), ("attention", "truncate"), ("selections", "delete"),
    ("runs", "garbage"), ("routes", "truncate"), ("metrics", "delete"), ("scores", "garbage"),
    ("estimates", "truncate"), ("catalog", "truncate"), ("images", "delete"), ("manifest", "garbage"),
    ("partition", "garbage"))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "how"), SLOW)
def test_the_report_and_a_rerun_work_around_a_damaged_file_or_name_it(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: Kind, how: Damage) -> None:
    home = copy_store(base, tmp_path / "home", kind)
    path = target(home, kind, base["a"])
    damage(path, how)
    assert_works_or_names(path, *mai(home, capfd, "report", "--out", str(tmp_path / "report.html")))
    rc, out, err = mai(home, capfd, "demo", "--local", "--limit", str(LIMIT), "--s2")  # the executors compute alike
    assert_works_or_names(path, rc, out, err)
    # a run over part of a shard set would report on part of its samples; nothing can be written where a file is
    assert rc == 0 or kind in ("samples", "partition")


def test_the_report_shows_a_sample_whose_image_asset_is_garbage_without_its_picture(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    home = copy_store(base, tmp_path / "home", "images")
    damage(target(home, "images", base["a"]), "garbage")
    rc, out, err = mai(home, capfd, "report", "--out", str(tmp_path / "report.html"))
    assert rc == 0 and "Traceback" not in out + err, out + err
    assert (tmp_path / "report.html").stat().st_size > 0


def test_sql_on_a_truncated_file_names_it_not_the_memory(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The issue's first symptom: `mai sql "SELECT 1"` printed a worker traceback and blamed the memory."""
    home = copy_store(base, tmp_path / "home")
    path = target(home, "generations", base["a"])
    rows = pq.ParquetFile(path).metadata.num_rows
    damage(path, "truncate")
    rc, out, err = mai(home, capfd, "sql", "SELECT 1")
    assert rc == 0 and "Traceback" not in out + err and "out of memory" not in err
    assert err.count(str(path)) == 1 and "mai store verify --repair" in err  # named once, with what to run
    rc, out, _ = mai(home, capfd, "sql", "SELECT count(*) FROM generations", "--format", "csv")
    others = sum(pq.read_metadata(f).num_rows  # the copy's other generations files, read straight from Parquet
                 for f in home.glob("store/generations/*/*/*.parquet") if f.resolve() != path)
    assert rc == 0 and out.split()[-1] == str(others) and rows > 0


def test_verify_reports_the_routes_a_deleted_generations_file_leaves_dangling(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    home = copy_store(base, tmp_path / "home")
    path = target(home, "generations", base["a"])
    lost = set(pq.read_table(path, columns=["gen_id"]).column(0).to_pylist())
    routes = pq.read_table(home / "store" / "routes" / base["a"] / "routes.parquet").to_pylist()
    named = {value for row in routes for key, value in row.items() if key.startswith("gen_") and value in lost}
    damage(path, "delete")
    rc, out, _ = mai(home, capfd, "store", "verify")
    assert rc == 1 and f"run {base['a']}: {len(named)} generations its routes name are not in the store" in out, out
    assert named == lost  # the demo run used every output of the file


Rerun = Callable[[Path, dict[str, str], pytest.CaptureFixture[str]], dict[str, Any]]


def _metrics(home: Path, run_id: str) -> list[tuple[Any, ...]]:
    _, rows = api.query(home, f"SELECT metric, subset, value, n FROM metrics WHERE run_id = '{run_id}' "
                              "ORDER BY metric, subset")
    return rows


def _estimate(home: Path, run_id: str) -> list[tuple[Any, ...]]:
    _, rows = api.query(home, f"SELECT estimate_name, stage, total_s FROM estimates WHERE run_id = '{run_id}' "
                              "ORDER BY stage")
    return rows


# each kind under a damage that SLOW does not give it, and how the lost rows come back
REPAIRS: tuple[tuple[Kind, Damage], ...] = (
    ("samples", "garbage"), ("generations", "truncate"), ("attention", "delete"), ("selections", "garbage"),
    ("runs", "truncate"), ("routes", "delete"), ("metrics", "garbage"), ("scores", "truncate"),
    ("estimates", "garbage"), ("catalog", "garbage"), ("images", "garbage"), ("manifest", "truncate"),
    ("partition", "truncate"))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "how"), REPAIRS)
def test_repair_quarantines_and_the_next_run_recomputes_exactly_the_lost_rows(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: Kind, how: Damage) -> None:
    pristine = Path(base["home"])
    home = copy_store(base, tmp_path / "home", kind)
    path = target(home, kind, base["a"])
    lost_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in path.glob("*.parquet")) if kind == "partition" \
        else pq.ParquetFile(path).metadata.num_rows if kind not in ("catalog", "images", "manifest") else 0
    damage(path, how)
    rc, out, err = mai(home, capfd, "store", "verify", "--repair")
    assert rc == 0 and "Traceback" not in out + err, out + err
    if how != "delete":
        quarantined = list((home / "store" / "quarantine").rglob(path.name)) if kind != "catalog" else []
        assert kind == "catalog" or quarantined, out  # moved, never deleted
        assert "rebuilt the catalog" in out
    if kind in ("samples", "generations", "runs", "routes", "images", "manifest", "partition"):
        manifest = api.run(demo_config(home), progress=False, local=True)  # images: the set materialised again, every output reused
        expected = lost_rows if kind in ("generations", "partition") else 0
        assert manifest["counts"]["generations_computed"] == expected
        assert _metrics(home, manifest["run_id"]) == _metrics(pristine, base["a"])
    elif kind in ("attention", "selections"):
        manifest = api.run(sparse_config(home), progress=False, local=True)
        counts = manifest["counts"]
        assert counts["generations_computed"] == 0 and counts["attention_rows_computed"] == 0
        assert counts["selections_computed"] == (lost_rows if kind == "selections" else 0)
        assert _metrics(home, manifest["run_id"]) == _metrics(pristine, base["b"])
    elif kind in ("metrics", "scores"):
        assert f"mai rescore {base['a']} --profile {path.stem}" in out
        assert mai(home, capfd, "rescore", base["a"], "--profile", path.stem)[0] == 0
        assert _metrics(home, base["a"]) == _metrics(pristine, base["a"])
    elif kind == "estimates":
        assert mai(home, capfd, "estimate", base["a"], *PROFILES)[0] == 0
        assert _estimate(home, base["a"]) == _estimate(pristine, base["a"])
    assert mai(home, capfd, "store", "verify")[0] == 0


def single_config(home: Path) -> RunConfig:
    """A configuration that computes over every sample (the small model's S answer at another budget): what a
    damaged image costs shows in it."""
    return shapes_pair_config(home=str(home), limit=LIMIT, mode="single", single_model="small", max_new_tokens={"S": 5})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["delete", "garbage"])
def test_a_damaged_image_costs_its_sample_and_repair_brings_it_back(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str], how: Damage) -> None:
    """Issue 59: one deleted or garbage image asset failed every run over it. Now it is that sample's recorded error
    (the run goes on), `verify` names it, and after `--repair` the run again computes exactly that sample."""
    home = copy_store(base, tmp_path / "home", "images")
    sample = first_sample(home, base["a"])
    path = image_of(home, sample["image_sha256"][0])
    damage(path, how)
    first = api.run(single_config(home), progress=False, local=True)
    assert first["counts"]["generations_computed"] == LIMIT - 1
    assert [e["sample_id"] for e in first["errors"]] == [sample["sample_id"]]
    reason = first["errors"][0]["error"]
    assert str(path) in reason and ("missing" if how == "delete" else "damaged") in reason, reason
    assert "mai store verify --repair" in reason
    _, routes = api.query(home, f"SELECT sample_id, route FROM routes WHERE run_id = '{first['run_id']}' "
                                "AND route = 'ERROR'")
    assert routes == [(sample["sample_id"], "ERROR")]
    rc, out, err = mai(home, capfd, "store", "verify")
    assert rc == 1 and f"problem: {path}: {'missing' if how == 'delete' else 'unreadable (damaged'}" in out, out
    rc, out, err = mai(home, capfd, "store", "verify", "--repair")
    assert rc == 0 and "Traceback" not in out + err and f"run(s) {first['run_id']} recorded them" in out, out + err
    again = api.run(single_config(home), progress=False, local=True)
    assert again["counts"]["generations_computed"] == 1 and again["errors"] == []
    assert path.read_bytes() and mai(home, capfd, "store", "verify")[0] == 0  # the image written again


def test_a_damaged_manifest_is_found_and_commands_say_one_line(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 59: a garbage manifest.json passed `verify`, and `mai baseline` / `mai rescore` printed a
    JSONDecodeError or UnicodeDecodeError traceback."""
    home = copy_store(base, tmp_path / "home")
    path = target(home, "manifest", base["a"])
    profile = target(home, "metrics", base["a"]).stem
    damage(path, "garbage")
    for argv in [("baseline", base["a"], "--out", str(tmp_path / "baseline.json")),
                 ("rescore", base["a"], "--profile", profile)]:
        rc, out, err = mai(home, capfd, *argv)
        assert rc != 0 and "Traceback" not in out + err, out + err
        assert err.strip().splitlines() == [err.strip()] and str(path) in err and "verify --repair" in err, err
    rc, out, _ = mai(home, capfd, "store", "verify")
    assert rc == 1 and f"problem: {path}: unreadable (not UTF-8 text" in out, out
    rc, out, _ = mai(home, capfd, "store", "verify", "--repair")
    assert rc == 0 and f"run {base['a']} no longer counts as complete" in out, out
    assert not (tmp_path / "baseline.json").exists()
