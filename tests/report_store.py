"""One real store for the dashboard tests (compare, policy lab, report), built once per test session through the
real pipeline: the trained shapes pair's cascade, its baselines (small S, small R, small R+S2, large S, large R,
Full RT), an S2 toggle, a 2-layer sparse-RT sweep in cascade mode and one in Full-RT mode, two published latency
profiles, one measured on this CPU, and an estimate of every run as the README makes them (`mai estimate RUN
--small-profile h100-2b --large-profile h100-8b`: named after the profiles each used, 'h100-2b+h100-8b' for a
pair's run, 'h100-8b' for the large model's).
The runs compute in this process (the in-process executor: what the report reads is the store, whichever executor
wrote it); the measured profile is the `mai-profile` flow, so a module using the store requests `prefect_server`.
The tests only read it; the session's xdist workers share it (the first one in builds it)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mai.files import write_atomically
from tests.helpers import link_shapes, shared_by_workers

LIMIT = 16
LAYERS = (1, 2)
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Store:
    home: Path
    runs: dict[str, str]  # label -> run id


_built: dict[Path, Store] = {}


def report_store(factory: pytest.TempPathFactory, assets_home: Path, shapes_dataset: Path) -> Store:
    """The session's store, built by the first of its xdist workers to ask; the others read its run ids."""
    base = factory.getbasetemp()
    if base not in _built:
        with shared_by_workers(factory, "report-store") as root:
            runs = root / "runs.json"  # written last: the store is complete
            if not runs.exists():
                write_atomically(runs, json.dumps(_build(root / "home", assets_home, shapes_dataset).runs))
            _built[base] = Store(root / "home", json.loads(runs.read_text()))
    return _built[base]


def _build(root: Path, assets_home: Path, shapes_dataset: Path) -> Store:
    from mai import api
    from mai.config import RunConfig, shapes_pair_config, sweep_variants

    shutil.copytree(assets_home / "models", root / "models")
    link_shapes(shapes_dataset, root)

    def stored(config: RunConfig) -> str:  # in this process, no Prefect: the store is what the report reads
        return str(api.run(config, progress=False, local=True)["run_id"])

    def run(**overrides: Any) -> str:
        return stored(shapes_pair_config(home=str(root), limit=LIMIT, **overrides))

    runs = {"cascade": run(), "cascade_s2": run(s2=True),
            "large_s": run(mode="single", single_model="large", single_prompt="S"),
            "small_s": run(mode="single", single_model="small", single_prompt="S"),
            "small_r": run(mode="single", single_model="small", single_prompt="R"),
            "small_r_s2": run(mode="single", single_model="small", single_prompt="R", s2=True),
            "large_r": run(mode="single", single_model="large", single_prompt="R"),
            "full_rt": run(mode="full_rt")}
    # the two sweeps' runs, as `mai sweep` makes them (the `mai-sweep` flow runs its variants in turn)
    for prefix, mode in (("sparse", {}), ("full_rt_sparse", {"mode": "full_rt"})):
        variants = sweep_variants(shapes_pair_config(home=str(root), limit=LIMIT, **mode), list(LAYERS))
        for layer, variant in zip(LAYERS, variants):
            runs[f"{prefix}_l{layer}"] = stored(variant)
    csv = REPO / "docs" / "paper_latency_h100.csv"
    api.import_profile(csv, "h100-2b", model="Qwen3-VL-2B", home=root)
    api.import_profile(csv, "h100-8b", model="Qwen3-VL-8B", home=root)
    api.profile("mai-shapes-small", "shapes-small-cpu", [128, 256], [16], [8, 32], repeats=2, home=root)
    for run_id in runs.values():
        api.estimate(run_id, small_profile="h100-2b", large_profile="h100-8b", home=root)
    return Store(root, runs)
