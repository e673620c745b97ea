"""A damaged or missing file costs its rows, never the store (storage/damage.py, storage/health.py), and `mai store
verify` finds every kind of damage and `--repair` moves it aside (storage/verify.py).

One real store is built per module (the demo's cascade with S2, a sparse-RT run, an estimate of each); each case
works on a copy with one file of one table truncated, overwritten with garbage or deleted, and runs the commands a
user would through `mai`'s own entry point (in this process: each command's output, a forked `mai sql` worker's
included, is read from the file descriptors)."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq
import pytest
from mai.flows.cli import main

from mai import api
from mai.config import RunConfig, shapes_pair_config

pytestmark = pytest.mark.prefect

LIMIT = 16
LAYER = 1
PROFILES = ("--small-profile", "h100-2b", "--large-profile", "h100-8b")
REPO = Path(__file__).resolve().parents[1]
Kind = Literal["samples", "generations", "attention", "selections", "runs", "routes", "metrics", "scores",
               "estimates", "catalog"]
Damage = Literal["truncate", "garbage", "delete"]
KINDS: tuple[Kind, ...] = ("samples", "generations", "attention", "selections", "runs", "routes", "metrics",
                           "scores", "estimates", "catalog")
DAMAGES: tuple[Damage, ...] = ("truncate", "garbage", "delete")
SHARED = ("models", "datasets", "images")  # read-only for these cases: linked into each copy, not copied


def demo_config(home: Path) -> RunConfig:
    return shapes_pair_config(home=str(home), limit=LIMIT, s2=True, run_name="demo")


def sparse_config(home: Path) -> RunConfig:
    return shapes_pair_config(home=str(home), limit=LIMIT, transfer="sparse", transfer_layer=LAYER)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, prefect_server: str, assets_home: Path,
         shapes_dataset: Path) -> dict[str, str]:
    """The module's store: run ids of the demo (A, estimated) and the sparse run (B), and its root (`home`)."""
    from tests.helpers import link_shapes

    root = tmp_path_factory.mktemp("damage") / "home"
    shutil.copytree(assets_home / "models", root / "models")
    link_shapes(shapes_dataset, root)
    a = api.run(demo_config(root), progress=False)["run_id"]
    b = api.run(sparse_config(root), progress=False)["run_id"]
    csv = REPO / "docs" / "paper_latency_h100.csv"
    api.import_profile(csv, "h100-2b", model="Qwen3-VL-2B", home=root)
    api.import_profile(csv, "h100-8b", model="Qwen3-VL-8B", home=root)
    api.estimate(a, small_profile="h100-2b", large_profile="h100-8b", home=root)
    return {"home": str(root), "a": a, "b": b}


def copy_store(base: dict[str, str], destination: Path) -> Path:
    """A copy of the module's store (partition links are relative: they stay inside the copy)."""
    source = Path(base["home"])
    destination.mkdir()
    for entry in source.iterdir():
        if entry.name in SHARED:
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
    }[kind]()
    assert found and found[0].exists(), kind
    return found[0].resolve()  # a partition's file by its version path, as every listing names it


def damage(path: Path, how: Damage) -> None:
    if how == "truncate":
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
    home = copy_store(base, tmp_path / "home")
    path = target(home, kind, base["a"])
    damage(path, how)
    view = "runs" if kind == "catalog" else kind
    for argv in [("sql", "SELECT 1"), ("sql", f"SELECT count(*) FROM {view}"), ("store", "stats"),
                 ("compare", base["a"], base["b"])]:
        assert_works_or_names(path, *mai(home, capfd, *argv))
    rc, out, err = mai(home, capfd, "store", "verify")
    assert "Traceback" not in out + err and rc in (0, 1), out + err
    if how != "delete":
        assert rc == 1 and (f"problem: {path}: unreadable" in out or kind == "catalog"), out
        assert kind != "catalog" or f"problem: {path}: {'truncated' if how == 'truncate' else 'not a DuckDB'}" in out


# the slow commands (the report, a re-run) on each kind under one damage, and the other damages under repair below
SLOW: tuple[tuple[Kind, Damage], ...] = (
    ("samples", "delete"), ("generations", "garbage"), ("attention", "truncate"), ("selections", "delete"),
    ("runs", "garbage"), ("routes", "truncate"), ("metrics", "delete"), ("scores", "garbage"),
    ("estimates", "truncate"), ("catalog", "truncate"))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "how"), SLOW)
def test_the_report_and_a_rerun_work_around_a_damaged_file_or_name_it(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: Kind, how: Damage) -> None:
    home = copy_store(base, tmp_path / "home")
    path = target(home, kind, base["a"])
    damage(path, how)
    assert_works_or_names(path, *mai(home, capfd, "report", "--out", str(tmp_path / "report.html")))
    rc, out, err = mai(home, capfd, "demo", "--limit", str(LIMIT), "--s2")
    assert_works_or_names(path, rc, out, err)
    assert rc == 0 or kind == "samples"  # a run over part of a shard set would report on part of its samples


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
    ("estimates", "garbage"), ("catalog", "garbage"))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "how"), REPAIRS)
def test_repair_quarantines_and_the_next_run_recomputes_exactly_the_lost_rows(
        base: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: Kind, how: Damage) -> None:
    pristine = Path(base["home"])
    home = copy_store(base, tmp_path / "home")
    path = target(home, kind, base["a"])
    lost_rows = pq.ParquetFile(path).metadata.num_rows if kind != "catalog" else 0
    damage(path, how)
    rc, out, err = mai(home, capfd, "store", "verify", "--repair")
    assert rc == 0 and "Traceback" not in out + err, out + err
    if how != "delete":
        quarantined = list((home / "store" / "quarantine").rglob(path.name)) if kind != "catalog" else []
        assert kind == "catalog" or quarantined, out  # moved, never deleted
        assert "rebuilt the catalog" in out
    if kind in ("samples", "generations", "runs", "routes"):
        manifest = api.run(demo_config(home), progress=False)
        expected = lost_rows if kind == "generations" else 0
        assert manifest["counts"]["generations_computed"] == expected
        assert _metrics(home, manifest["run_id"]) == _metrics(pristine, base["a"])
    elif kind in ("attention", "selections"):
        manifest = api.run(sparse_config(home), progress=False)
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
