"""Where a `mai` flow's Prefect API comes from, asked only when a flow is about to run (a stored run needs none).

1. `PREFECT_API_URL` in Prefect's settings (environment, profile, prefect.toml): a configured server, used as it is.
2. Else a temporary server for the one command, started by the command with a death signal (PR_SET_PDEATHSIG), so
   it dies with the command however it ends (Prefect's own temporary server outlived 8 of 13 killed runs). Its
   database is the store's own, in PREFECT_HOME: commands on different stores never wait on each other's start;
   on one store they take turns (two servers migrating one fresh database fail). A store's first server starts on
   a copy of an already migrated database (`_template`). Databases go with their store, the rest are kept to a
   bound (`prune_server_databases`).

`mai` manages no long-lived server and signals no process it did not start (docs/prefect-and-workers.md).
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import importlib.metadata
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

from mai.errors import ConfigError
from mai.files import atomic_path, write_atomically
from mai.storage.paths import Home, read_store_id, store_id

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

START_TIMEOUT_S = 180.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# the temporary server this process started (`ensure_api`, `start_early`), if any, and its API's URL; done once its
# API answers
_temporary: tuple[subprocess.Popen[bytes], str] | None = None
_answering: Future[None] | None = None


def healthy(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def ensure_api(home: Home) -> AbstractContextManager[object]:
    """Before a flow runs: the settings to run it under, a copy of this process's. The API Prefect's settings name,
    as it is; when they name none, this process's temporary server for the store at `home` (started once), with its
    URL (overriding what Prefect read at import, for flows and tasks alike) and no flow-run heartbeats (nothing
    watches them there, and every flow run's end waits up to 1 s for its heartbeat thread, prefect 3.9)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    if _configured_api():
        return temporary_settings()  # a copy of this process's settings, that `failing_fast_once_lost` may change
    url = start_temporary_server(home)  # begun earlier (`start_early`) or now
    return temporary_settings(updates={PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def _configured_api() -> bool:
    """Whether the flows run on an API that Prefect's settings name (not this process's temporary server)."""
    from prefect.settings import PREFECT_API_URL

    return _temporary is None and bool(PREFECT_API_URL.value())


def server_directory(home: Home) -> Path:
    """Where the temporary servers of commands on the store at `home` keep their database: in PREFECT_HOME (a
    local disk, where SQLite belongs), one folder per store (by its stable id: every host's mount of it alike)."""
    prefect_home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    return prefect_home / "mai-stores" / store_id(home)


def server_start_lock(home: Home) -> Path:
    """Taken while a command starts its temporary server for the store at `home` (one start per database)."""
    return server_directory(home) / "start.lock"


# a database holds only the Prefect records of past commands (the store keeps every result): beyond the bound, the
# most recently used KEPT_DATABASES and any other used within IDLE_BEFORE_REMOVAL_S are kept
KEPT_DATABASES = 16
IDLE_BEFORE_REMOVAL_S = 7 * 86400.0
STORE_RECORD = "store"  # in a database's folder: the root of the store it serves, as its last command saw it


def prune_server_databases(stores: Path, keep: int = KEPT_DATABASES, idle_s: float = IDLE_BEFORE_REMOVAL_S
                           ) -> list[Path]:
    """Removes the store databases in `stores` whose store is gone (no store with that id at its recorded root),
    and those beyond the `keep` most recently used that no command used for `idle_s`; none that a command is
    starting a server on (its start lock held). Returns what it removed."""
    try:
        folders = sorted((d for d in stores.iterdir() if d.is_dir()), key=_last_used, reverse=True)
    except OSError:
        return []
    removed = []
    for rank, folder in enumerate(folders):
        if not _store_gone(folder) and (rank < keep or time.time() - _last_used(folder) < idle_s):
            continue
        with open(folder / "start.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _store_gone(folder: Path) -> bool:
    """Whether the store a database served no longer exists at the root its folder records (a folder without the
    record, from before it, counts as in use: the bound applies)."""
    try:
        root = Path((folder / STORE_RECORD).read_text().strip())
        return read_store_id(root) != folder.name
    except (OSError, ConfigError):  # no record, or a store whose id cannot be read now: not known to be gone
        return False


def _last_used(folder: Path) -> float:
    """When a command last wrote the store database in `folder` (SQLite's files, the start lock)."""
    try:
        return max((f.stat().st_mtime for f in folder.iterdir()), default=folder.stat().st_mtime)
    except OSError:
        return 0.0


def start_early(home: Home) -> None:
    """When Prefect's settings name no API: this process's temporary server, started now without waiting for its API
    (`begin_temporary_server`), for a command about to spend seconds before its flow runs (checking new prompts)."""
    if not _configured_api():
        begin_temporary_server(home)


def start_temporary_server(home: Home) -> str:
    """Prefect's API app on a free port on 127.0.0.1 for this process alone, on the store's database
    (`server_directory`), once its API answers (started now, or begun earlier); returns its URL, which
    PREFECT_API_URL gives the command's subprocesses."""
    begin_temporary_server(home)
    assert _temporary is not None and _answering is not None
    _answering.result()  # the start's error, if it failed
    os.environ["PREFECT_API_URL"] = _temporary[1]
    return _temporary[1]


def begin_temporary_server(home: Home) -> None:
    """Starts this process's temporary server (once) and returns at once; a thread waits for its API to answer,
    keeps the template and lets the start lock go (`_answering`), so the lock is freed whether or not this process
    ever waits. Call from the main thread: the death signal follows the thread that started the server."""
    global _temporary, _answering
    if _temporary is not None:
        return
    directory = server_directory(home)
    prune_server_databases(directory.parent)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / STORE_RECORD, str(home.root.resolve()))
    # one start at a time per database: a server creates and migrates its database before its API answers, and
    # two servers migrating a fresh database at once fail (alembic: "Online migration expected to match one row");
    # the kernel drops the lock when this process dies. Another store's commands take another lock.
    lock = open(server_start_lock(home), "a")  # noqa: SIM115  (closed by the thread once the API answers)
    fcntl.flock(lock, fcntl.LOCK_EX)
    database, template = directory / "prefect.db", _template(directory.parent)
    fresh = not database.exists()
    if fresh and template.exists():
        with atomic_path(database) as temp:
            shutil.copyfile(template, temp)
    process, url = _spawn_server(database)
    atexit.register(_stop_temporary, process)
    _temporary, _answering = (process, url), Future()
    keep = (database, template) if fresh and not template.exists() else None
    threading.Thread(target=_settle, args=(process, url, lock, keep, _answering), daemon=True,
                     name="mai-temporary-server-start").start()


def _settle(process: subprocess.Popen[bytes], url: str, lock: IO[str], keep: tuple[Path, Path] | None,
            answering: Future[None]) -> None:
    """Waits for the API; `keep`: the fresh database just migrated, and the template to keep it as."""
    try:
        _await_api(process, url)
        if keep is not None:
            _keep_as_template(*keep)
        answering.set_result(None)
    except BaseException as error:  # noqa: BLE001 (handed to the waiter)
        answering.set_exception(error)
    finally:
        lock.close()


def _template(stores: Path) -> Path:
    """A database migrated by this Prefect version and holding nothing else: a store's first server starts on a
    copy of it instead of migrating a new database (Prefect's hundred-odd migrations, most of a first start)."""
    return stores / f"template-prefect-{importlib.metadata.version('prefect')}.db"


def _keep_as_template(database: Path, template: Path) -> None:
    """A copy of `database`, just migrated by the server that runs on it now (SQLite's backup: a consistent copy
    while the server writes), as `template`; the templates of other Prefect versions go."""
    for other in template.parent.glob("template-prefect-*.db"):
        if other != template:
            other.unlink(missing_ok=True)
    with atomic_path(template) as temp, closing(sqlite3.connect(database)) as source, \
            closing(sqlite3.connect(temp)) as copy:
        source.backup(copy)


def _spawn_server(database: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Prefect's API app on a free port on `database` (which it creates and migrates before its API answers)."""
    port = _free_port()
    # no UI; Prefect's app as its own temporary server makes it (`create_app(ephemeral=True)`: the reduced set of
    # background services), retrying requests SQLite refused as locked (`temporary_app`). Started here rather than
    # through Prefect's SubprocessASGIServer for the death signal and that retry, which it cannot be given
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{database}"}
    process = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "mai.flows.prefect_api:temporary_app",
                                "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"],
                               env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # noqa: PLW1509
    return process, f"http://127.0.0.1:{port}/api"


def _await_api(process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(url):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the temporary Prefect server did not start (exit status {process.poll()})")
        time.sleep(0.1)


LOCKED_RETRY_S = 0.05     # between a request's tries after SQLite answered "database is locked" (503)
LOCKED_PATIENCE_S = 60.0  # how long the temporary server retries one request itself (SQLite's own busy timeout)


def temporary_app() -> ASGIApp:
    """The temporary server's app: Prefect's (`prefect.server.api.server:create_app`), whose requests that SQLite
    refused with "database is locked" are tried again here within `LOCKED_RETRY_S` rather than by the client after
    ~2 s. On one SQLite database Prefect's task-run recorder (writing the task runs of the run's events) and the
    API (creating the first shard's subflow) collide in about half of the demo's runs: a deferred transaction that
    must upgrade to write gets "locked" at once, whatever the busy timeout, and the server answers 503, which
    Prefect's client retries after 2 s x jitter (2.0-2.4 s measured; docs/benchmarks.md, "The demo's wall time
    against its engine time"). A request still refused after `LOCKED_PATIENCE_S` gets its 503, and the client's own
    retries, as before."""
    from prefect.server.api.server import create_app

    return RetryWhileLocked(create_app(ephemeral=True, final=True))


class RetryWhileLocked:
    """ASGI middleware: an HTTP request answered 503 is run again (its body replayed) until it is answered otherwise
    or `patience_s` has passed; any other response, and every websocket and lifespan message, passes as it is."""

    def __init__(self, app: ASGIApp, retry_s: float = LOCKED_RETRY_S, patience_s: float = LOCKED_PATIENCE_S
                 ) -> None:
        self.app, self.retry_s, self.patience_s = app, retry_s, patience_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        import anyio

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:  # the whole request body, to replay it
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        deadline = time.monotonic() + self.patience_s
        while True:
            refused = await self._try(scope, body, receive, send, last=time.monotonic() >= deadline)
            if not refused:
                return
            await anyio.sleep(self.retry_s)

    async def _try(self, scope: Scope, body: bytes, receive: Receive, send: Send, last: bool) -> bool:
        """Runs the request once; True when it was refused with 503 (and nothing of the answer was sent)."""
        given, refused = False, False

        async def replay() -> Message:
            nonlocal given
            if given:  # after the body: what the client does next (a disconnect)
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def answer(message: Message) -> None:
            nonlocal refused
            if message["type"] == "http.response.start":
                refused = message["status"] == 503 and not last
            if not refused:
                await send(message)

        try:
            await self.app(dict(scope), replay, answer)  # a copy: routing rewrites the scope it is given
        except Exception:
            if not refused:
                raise
            # Starlette's error middleware sends the handler's 503 and then raises the error again: the refusal
            # is answered by the next try
        return refused


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_lost(error: BaseException) -> str | None:
    """One line for a command whose Prefect API stopped answering while it ran (the server died, the network went),
    None for any other failure. Every output is written atomically, so what the run stored is kept and its next
    run computes only the rest."""
    if "prefect" not in sys.modules:  # no Prefect client ran
        return None
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = str(PREFECT_API_URL.value() or "")
    cause: BaseException | None = error
    while cause is not None and not (isinstance(cause, httpx.TransportError) and _request_to(cause, url)):
        cause = cause.__cause__ or cause.__context__
    if cause is None:  # not a call to the Prefect API (a model download, say)
        return None
    return (f"the Prefect API at {url} stopped answering ({type(cause).__name__}: {cause}); what the run stored is "
            "kept: run the command again once the API answers (or with PREFECT_API_URL unset, for a temporary "
            "server) and it computes only what is missing")


@contextmanager
def failing_fast_once_lost() -> Iterator[None]:
    """Around a flow's body: once a call to the Prefect API failed for good (its server died), every later call
    under these settings fails at once. Prefect's client retries each call (2 + 4 + ... + 32 s by default), so after
    the call that lost the API the engines' own last calls (the Failed states of the shard's and the run's flow
    runs) waited out theirs too: 220 s from a dead server to the command's one line, instead of the first call's
    62 s (docs/benchmarks.md, "A lost Prefect API")."""
    try:
        yield
    except Exception as error:
        if api_lost(error) is not None:
            from prefect.settings import get_current_settings

            get_current_settings().client.max_retries = 0  # `ensure_api`'s copy in a command; a drain's own process
        raise


def _request_to(error: BaseException, url: str) -> bool:
    """Whether the failed request went to the API at `url`."""
    try:
        target = str(error.request.url)  # type: ignore[attr-defined]  # an httpx.TransportError's request
    except (AttributeError, RuntimeError):  # RuntimeError: an error raised without its request
        return False
    return bool(url) and target.startswith(url.rstrip("/"))
