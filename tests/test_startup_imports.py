"""A run whose outputs are all stored is a store lookup (mai/pipeline.py, in-process): a fresh process that re-runs a
configuration with no Prefect API configured (a plain run, a fanned-out one, or `mai regress` against a baseline)
imports neither torch nor transformers (nor datasets, nor Prefect, nor pandas, which pyarrow imports for `pa.array`
on Python values: the store builds its columns from buffers, storage/parquet.py), starts no server (no process but
git's, for the manifest's commit), loads no model and computes nothing; with a configured API that does not
answer, the run is the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mai.cli import main
from tests.helpers import link_shapes, run, seeded_store

PROBE = """
import json, os, subprocess, sys
started = []
popen = subprocess.Popen.__init__
def recording(self, args, *rest, **options):
    started.append(os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args)))
    popen(self, args, *rest, **options)
subprocess.Popen.__init__ = recording
from mai.cli import main
from mai.backends.registry import loaded_engines
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers", "datasets", "prefect", "pandas") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy, "engines": len(loaded_engines()), "started": sorted(set(started)),
                  "api": os.environ.get("PREFECT_API_URL")}), file=sys.stderr)
"""
REPO = Path(__file__).resolve().parents[1]
ARGS = ["run", "--limit", "8", "--shards", "1", "--max-new-tokens", "S=4", "--max-new-tokens", "R=8",
        "--max-new-tokens", "RT=4", "--json"]


def run_in_fresh_process(home: Path, api: str | None = None, args: list[str] = ARGS
                         ) -> tuple[dict[str, object], dict[str, object]]:
    out, probe = probe_fresh_process(home, args, api)
    return json.loads(out), probe


def probe_fresh_process(home: Path, args: list[str], api: str | None = None) -> tuple[str, dict[str, object]]:
    """The command's standard output, and what the fresh process that ran it imported and started."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_HOME": str(home.parent / "no-prefect-profile")}  # no profile naming an API
    env.pop("PREFECT_API_URL", None)  # as a user's shell without one
    if api:
        env["PREFECT_API_URL"] = api
    done = subprocess.run([sys.executable, "-c", PROBE, "--home", str(home), *args], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.prefect
def test_a_cached_rerun_imports_no_model_library_and_loads_no_model(tmp_path: Path, assets_home: Path) -> None:
    home = seeded_store(tmp_path / "store", assets_home)
    assert main(["--home", str(home), *ARGS]) == 0  # computes everything, in this process
    manifest, probe = run_in_fresh_process(home)
    assert probe == {"code": 0, "heavy": [], "engines": 0, "started": ["git"], "api": None}, probe
    counts = manifest["counts"]
    assert isinstance(counts, dict)
    assert counts["generations_computed"] == 0 and counts["generations_reused"] > 0
    # a configured Prefect API that is down (it died, or never ran) changes nothing of a stored run
    dead = "http://127.0.0.1:9/api"
    again, probe = run_in_fresh_process(home, api=dead)
    assert probe == {"code": 0, "heavy": [], "engines": 0, "started": ["git"], "api": dead}, probe
    assert again["routes"] == manifest["routes"] and again["metrics"] == manifest["metrics"]
    # a re-score of a stored run is a store lookup too
    rescored, probe = run_in_fresh_process(home, args=["rescore", str(manifest["run_id"]), "--profile",
                                                        str(manifest["scorer_profile"]), "--json"])
    assert probe == {"code": 0, "heavy": [], "engines": 0, "started": [], "api": None}, probe
    assert rescored["run_id"] == manifest["run_id"]
    # so is a fanned-out run whose outputs are all stored (no worker, no Prefect server needed) ...
    fanned, probe = run_in_fresh_process(home, args=[*ARGS, "--workers", "2"])
    assert probe == {"code": 0, "heavy": [], "engines": 0, "started": ["git"], "api": None}, probe
    assert fanned["counts"]["generations_computed"] == 0 and fanned["routes"] == manifest["routes"]
    # ... and `mai regress` of a stored configuration against a baseline
    config = tmp_path / "config.json"
    config.write_text(json.dumps({k: v for k, v in manifest["config"].items() if k != "home"}))
    out, probe = probe_fresh_process(home, ["regress", "--config", str(config), "--baseline", str(manifest["run_id"])])
    assert probe == {"code": 0, "heavy": [], "engines": 0, "started": ["git"], "api": None}, probe
    assert "no regression" in out, out


def test_mai_estimate_is_a_store_computation_with_no_prefect_and_no_server(home: Path) -> None:
    """`mai estimate` prices a stored run from the store and runs no model: a fresh process with no Prefect API
    configured imports neither Prefect nor the model libraries and starts no process (before, it started a
    temporary Prefect server for a function that never called it)."""
    from mai import api

    manifest = run(home, limit=4, shards=1)  # in this process (the in-process executor)
    for name, model in (("h100-2b", "Qwen3-VL-2B"), ("h100-8b", "Qwen3-VL-8B")):
        api.import_profile(REPO / "docs" / "paper_latency_h100.csv", name, model=model, home=home)
    out, probe = probe_fresh_process(home, ["estimate", str(manifest["run_id"]), "--small-profile", "h100-2b",
                                            "--large-profile", "h100-8b", "--json"])
    assert probe == {"code": 0, "heavy": [], "engines": 0, "started": [], "api": None}, probe
    stages = json.loads(out)
    assert {s["profile"] for s in stages} >= {"h100-2b", "h100-8b"} and sum(s["total_s"] for s in stages) > 0, stages
    assert api.query(home, "SELECT count(DISTINCT estimate_name) FROM estimates")[1] == [(1,)]


SQL_PROBE = """
import json, sys
from mai.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in ("torch", "transformers", "datasets", "prefect", "pandas", "pydantic", "pyarrow", "numpy")
                if m in sys.modules)
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def test_mai_sql_imports_neither_prefect_nor_the_model_libraries(tmp_path: Path) -> None:
    """`mai sql` reads the catalog: DuckDB alone, nothing of Prefect, torch, transformers, datasets or pandas
    (about a second between them on the 2-core machine, against the command's goal of 0.5 s), nor pyarrow and
    numpy (about 0.12 s of CPU: the views' column types come from storage/rows.py)."""
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING"}
    done = subprocess.run([sys.executable, "-c", SQL_PROBE, "--home", str(tmp_path / "store"), "sql", "SELECT 42"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    probe = json.loads(done.stderr.strip().splitlines()[-1])
    assert probe == {"code": 0, "loaded": []}, done.stderr
    assert "42" in done.stdout


def _without_wall_time(summary: str) -> list[str]:
    """The summary's answer: its lines without the times and the run id (a new one per run)."""
    return [re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "RUN", line) for line in summary.splitlines()
            if not line.startswith(("wall time:", "phases:"))]


@pytest.mark.slow
def test_any_slice_of_stored_outputs_is_a_lookup_in_this_process(tmp_path: Path, shapes_dataset: Path) -> None:
    """A slice of stored outputs (the demo's first 8 rows, after a run over the first 16 at the demo's shards and
    budgets: a cheaper `mai demo`) is the pipeline on the in-process executor: its samples are read from the larger
    slice the store holds, nothing is computed, no Prefect is imported and no process but git's (the manifest's
    commit) starts, with PREFECT_API_URL unset or naming a closed port; with S2 too, once S2 is stored. The wider
    runs that store the outputs compute in this process (the in-process executor: what they store is the subject,
    and every executor stores the same, tests/test_executors.py), on the session's shapes splits."""
    from mai import api
    from mai.config import shapes_pair_config

    home = tmp_path / "store"
    link_shapes(shapes_dataset, home)
    for s2 in (False, True):
        api.run(shapes_pair_config(home=str(home), limit=16, s2=s2, run_name="wide"), progress=False, local=True)
        args = ["demo", "--limit", "8", *(["--s2"] if s2 else [])]
        answers = []
        for api_url in (None, "http://127.0.0.1:9/api"):
            out, probe = probe_fresh_process(home, args, api_url)
            assert probe == {"code": 0, "heavy": [], "engines": 0, "started": ["git"], "api": api_url}, probe
            assert "generations: 0 computed" in out, out
            answers.append(_without_wall_time(out))
        assert answers[0] == answers[1]
