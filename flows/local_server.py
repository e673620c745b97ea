"""Where a `mai` command's Prefect API comes from.

1. A configured server (`PREFECT_API_URL`, e.g. the cluster's): used as it is.
2. Else the persistent local server, when one runs: `mai server start` starts `prefect server start` on 127.0.0.1
   in a session of its own, and every later `mai` command of this user uses it. It is meant to outlive commands
   (that is what saves their start-up: a command against it skips starting a temporary API server, about half
   of a cached run's wall time; docs/benchmarks.md, "Startup"), so a killed command leaves nothing behind that was
   not already running; `mai server stop` ends it.
3. Else a temporary server for the one command (what a fresh machine gets: nothing to set up), started by the
   command itself rather than by Prefect's client, so that it dies with the command however the command ends:
   the kernel sends it SIGTERM when its parent dies (PR_SET_PDEATHSIG), a SIGKILL of `mai run` included; Prefect's
   own temporary server outlived 8 of 13 killed runs.

A running server is not started implicitly: a background process that a command leaves behind should be one the
user asked for. Its state (URL, process id, log, database) lives in `MAI_PREFECT_SERVER_DIR` (default
`~/.mai-prefect-server`), shared by every store of the user.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

START_TIMEOUT_S = 180.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# where this process's Prefect API came from (`provide_api`): set once, by the CLI, before any command runs
_provided: str | None = None


@dataclass(frozen=True)
class LocalServer:
    url: str     # the API's base URL (PREFECT_API_URL), e.g. http://127.0.0.1:4201/api
    pid: int     # the `prefect server start` process, leader of its own session
    log: str


def server_dir() -> Path:
    return Path(os.environ.get("MAI_PREFECT_SERVER_DIR") or Path.home() / ".mai-prefect-server")


def _state_file() -> Path:
    return server_dir() / "server.json"


def healthy(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def running_server() -> LocalServer | None:
    """The recorded local server, when its process lives and its API answers."""
    try:
        server = LocalServer(**json.loads(_state_file().read_text()))
        os.kill(server.pid, 0)
    except (OSError, ValueError, TypeError):
        return None
    return server if healthy(server.url) else None


def use_running_server() -> str | None:
    """For this process: the local server's URL as PREFECT_API_URL, unless one is configured or none runs."""
    # Prefect reads its settings once per process: switching after it was imported (a notebook, a test harness)
    # would send a run's flow and its tasks to different servers
    if os.environ.get("PREFECT_API_URL") or "prefect" in sys.modules or _url_in_prefect_profile():
        return None
    server = running_server()
    if server is None:
        return None
    os.environ["PREFECT_API_URL"] = server.url
    return server.url


def _url_in_prefect_profile() -> bool:
    """Whether the active Prefect profile sets PREFECT_API_URL (`prefect config set ...`): read from its file, so
    that finding out costs no Prefect import."""
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect")
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml")
    try:
        profiles = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    return bool(profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL"))


def start_temporary_server() -> subprocess.Popen[bytes]:
    """Prefect's API app on a free port on 127.0.0.1 for this process alone (its database is Prefect's default, as
    for Prefect's own temporary server); PREFECT_API_URL points this process at it. Call from the main thread:
    the death signal follows the thread that started the server."""
    # the server keeps its database in PREFECT_HOME: the folder exists before the server starts
    prefect_home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    prefect_home.mkdir(parents=True, exist_ok=True)
    # one start at a time per database: a server creates and migrates its database before its API answers, and
    # two servers migrating a fresh database at once fail (alembic: "Online migration expected to match one row");
    # the kernel drops the lock when this process dies
    with open(prefect_home / ".mai-server-start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        process, url = _start_server_process()
    os.environ["PREFECT_API_URL"] = url
    atexit.register(_stop_temporary, process)
    return process


def _start_server_process() -> tuple[subprocess.Popen[bytes], str]:
    """Prefect's API app on a free port, once its API answers (its database created and migrated by then)."""
    port = _free_port()
    # the app and settings Prefect's own temporary server runs with (prefect.server.api.server.SubprocessASGIServer,
    # prefect 3.8-3.9): no UI, and the reduced set of background services of an ephemeral server
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT__SERVER_EPHEMERAL": "1"}
    process = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
                                "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"],
                               env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # noqa: PLW1509
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(url):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the temporary Prefect server did not start (exit status {process.poll()})")
        time.sleep(0.1)
    return process, url


def _die_with_parent() -> None:
    """In the server's process, before it runs: SIGTERM when the process that started it dies (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_temporary(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def provide_api(runs_flows: bool) -> str:
    """Give this process a Prefect API before a command runs; returns where it came from: `configured`, `local`
    (the running local server), `temporary` (started here, for a command that runs flows) or `none` (a command
    that only reads the store needs none)."""
    global _provided
    if os.environ.get("PREFECT_API_URL") or "prefect" in sys.modules or _url_in_prefect_profile():
        _provided = "configured"
    elif use_running_server():
        _provided = "local"
    elif not runs_flows:
        _provided = "none"
    else:
        start_temporary_server()
        _provided = "temporary"
    return _provided


def serves_mai_alone() -> bool:
    """Whether this process's Prefect API is a server `mai` started (the local or a temporary one), rather than
    one the user configured: no automation watches flow-run heartbeats there, so a flow run's heartbeats are
    events nobody reads (and each in-process flow run's end waits up to 1 s for its heartbeat thread)."""
    return _provided in ("local", "temporary")


def start_server(port: int | None = None) -> LocalServer:
    """Start the local server (or return the one that runs) and wait until its API answers."""
    server = running_server()
    if server is not None:
        return server
    directory = server_dir()
    directory.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    log = directory / "server.log"
    env = {**os.environ, "PREFECT_HOME": str(directory / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    with open(log, "ab") as output:
        process = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                    "--port", str(port)], env=env, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = LocalServer(url=f"http://127.0.0.1:{port}/api", pid=process.pid, log=str(log))
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(server.url):
        if process.poll() is not None or time.monotonic() > deadline:
            _end(process.pid)
            raise RuntimeError(f"the Prefect server did not start (see {log})")
        time.sleep(0.5)
    _state_file().write_text(json.dumps(asdict(server)) + "\n")
    return server


def stop_server() -> LocalServer | None:
    """Stop the recorded local server (its whole session); returns what was stopped, None when none ran."""
    try:
        server = LocalServer(**json.loads(_state_file().read_text()))
    except (OSError, ValueError, TypeError):
        return None
    _end(server.pid)
    _state_file().unlink(missing_ok=True)
    return server


def _end(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM to the server's session (uvicorn and its workers), SIGKILL if it is still there after `timeout_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # our own child when this process started it
        if reaped:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
