"""The vLLM server registry is shared by every host of a store but keyed by host: a server listens on its own host's
127.0.0.1, so a shard on host B must neither use host A's entry nor take A's server for dead and remove it (#32).
Hosts are simulated by MAI_HOST_NAME and by a real UTS namespace (`unshare -u`, its own host name)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mai.backends import vllm_server
from mai.backends.vllm_server import ServerInfo
from mai.host import HOST_ENV, host_name
from mai.types import ModelSpec

MODEL = ModelSpec("mai-tiny-small", revision="sha256:abc", local=True)


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def live_url() -> Iterator[str]:
    """A server answering /health on 127.0.0.1, as a `vllm serve` would (stopped after the test)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _info(url: str) -> ServerInfo:
    return ServerInfo(model=MODEL.identity_name, url=url, owner="mai-serve", pid=os.getpid())


def _entries(home: Path) -> dict[str, dict[str, object]]:
    entries: dict[str, dict[str, object]] = json.loads(vllm_server.registry_path(home).read_text())
    return entries


def test_a_host_sees_only_its_own_servers_and_never_removes_another_hosts(
        tmp_path: Path, live_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dead_url = f"http://127.0.0.1:{vllm_server.free_port()}"  # nothing listens there on this machine
    monkeypatch.setenv(HOST_ENV, "host-a")
    vllm_server.register(tmp_path, MODEL, _info(dead_url))  # A's server: on B's 127.0.0.1 nothing answers
    assert list(_entries(tmp_path)) == [f"host-a/{MODEL.identity_name}@sha256:abc-float32"]

    monkeypatch.setenv(HOST_ENV, "host-b")
    assert vllm_server.lookup(tmp_path, MODEL) is None
    vllm_server.unregister(tmp_path, MODEL, dead_url)
    assert list(_entries(tmp_path)) == ["host-a/mai-tiny-small@sha256:abc-float32"], "B removed A's entry"

    vllm_server.register(tmp_path, MODEL, _info(live_url))  # B's own server is found on B
    found = vllm_server.lookup(tmp_path, MODEL)
    assert found is not None and found.url == live_url
    assert [(host, info.url) for host, info in vllm_server.registered(tmp_path)] == [
        ("host-a", dead_url), ("host-b", live_url)]

    monkeypatch.setenv(HOST_ENV, "host-a")  # on A, its own dead entry is dropped; B's live one stays
    assert vllm_server.lookup(tmp_path, MODEL) is None
    assert list(_entries(tmp_path)) == ["host-b/mai-tiny-small@sha256:abc-float32"]
    vllm_server.unregister(tmp_path, MODEL, live_url)  # A cannot unregister B's server either
    assert list(_entries(tmp_path)) == ["host-b/mai-tiny-small@sha256:abc-float32"]

    monkeypatch.setenv(HOST_ENV, "host-b")
    vllm_server.unregister(tmp_path, MODEL, live_url)
    assert _entries(tmp_path) == {}


CHILD = """
import sys
from pathlib import Path
from mai.backends import vllm_server
from mai.host import host_name
from mai.types import ModelSpec

model = ModelSpec("mai-tiny-small", revision="sha256:abc", local=True)
found = vllm_server.lookup(Path(sys.argv[1]), model)
vllm_server.unregister(Path(sys.argv[1]), model, sys.argv[2])
print(host_name(), found)
"""


@pytest.mark.cluster
def test_a_uts_namespace_host_ignores_the_other_hosts_entry(tmp_path: Path, live_url: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A host in its own UTS namespace (`hostname` set there, no MAI_HOST_NAME) is another host: it does not
    adopt this host's live server (its URL would be its own 127.0.0.1) nor remove its entry."""
    monkeypatch.delenv(HOST_ENV, raising=False)
    vllm_server.register(tmp_path, MODEL, _info(live_url))
    here = host_name()
    env = {k: v for k, v in os.environ.items() if k != HOST_ENV}
    child = subprocess.run(["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"', f"{here}-other",
                            sys.executable, "-c", CHILD, str(tmp_path), live_url],
                           check=False, capture_output=True, text=True, env=env, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [f"{here}-other", "None"]
    assert list(_entries(tmp_path)) == [f"{here}/mai-tiny-small@sha256:abc-float32"]
    found = vllm_server.lookup(tmp_path, MODEL)
    assert found is not None and found.url == live_url
