"""A throwaway PostgreSQL cluster (Debian's `postgresql`, which `make test` installs) and a Prefect server backed by
it, as a cluster's head node runs them (docs/cluster.md). Used by tests/test_cluster.py.

PostgreSQL refuses to run as root, and CI runs as root: the cluster belongs to the `postgres` system user that
Debian's package creates, in a directory of its own under /tmp (pytest's own temporary folders are root's, mode
0700). It listens on 127.0.0.1 only, with a password (scram), and both processes are children of the test, stopped
by it."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

POSTGRES_USER = "postgres"      # the system user of Debian's package: the cluster's files and processes are its
DATABASE = "prefect"


def postgres_bin() -> Path:
    """The newest installed server's bin directory (Debian keeps it off PATH: /usr/lib/postgresql/<major>/bin), or
    MAI_POSTGRES_BIN. Fails loudly: the cluster tests are part of `make test`, which installs the package."""
    given = os.environ.get("MAI_POSTGRES_BIN")
    candidates = [Path(given)] if given else sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                                                    key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    for directory in reversed(candidates):
        if (directory / "postgres").exists() and (directory / "initdb").exists():
            return directory
    raise RuntimeError("no PostgreSQL server found under /usr/lib/postgresql/*/bin (or MAI_POSTGRES_BIN): "
                       "`make postgresql` installs Debian's package")


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(ready: object, timeout_s: float, what: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Polls `ready()` until true; fails with the process's log when it exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    while not ready():  # type: ignore[operator]
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {timeout_s:.0f} s: {log.read_text()[-3000:]}")
        time.sleep(0.2)


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


@dataclass
class Postgres:
    """A running cluster: its connection URL for Prefect and its process."""

    directory: Path
    port: int
    password: str
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://mai:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        stop_process(self.process, signal.SIGINT)  # "fast" shutdown: no waiting for clients
        shutil.rmtree(self.directory, ignore_errors=True)


def start_postgres() -> Postgres:
    """initdb in a fresh directory, the server on 127.0.0.1:<free port>, and the `prefect` database."""
    binaries = postgres_bin()
    directory = Path(tempfile.mkdtemp(prefix="mai-postgres-"))
    shutil.chown(directory, POSTGRES_USER)
    password = secrets.token_hex(16)
    password_file = directory / "password"
    password_file.write_text(password + "\n")
    shutil.chown(password_file, POSTGRES_USER)
    as_postgres = {"user": POSTGRES_USER, "group": POSTGRES_USER, "extra_groups": [], "cwd": directory}
    initdb = subprocess.run([str(binaries / "initdb"), "-D", str(directory / "data"), "-U", "mai", "--pwfile",
                             str(password_file), "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"],
                            capture_output=True, text=True, check=False, **as_postgres)  # type: ignore[call-overload]
    if initdb.returncode != 0:
        raise RuntimeError(f"initdb failed: {initdb.stderr[-2000:]}")
    port = free_port()
    log = directory / "postgres.log"
    # fsync off: a throwaway cluster; the socket in its own directory (none in /var/run/postgresql needed)
    process = subprocess.Popen([str(binaries / "postgres"), "-D", str(directory / "data"), "-p", str(port), "-c",
                                "listen_addresses=127.0.0.1", "-k", str(directory), "-c", "fsync=off"],
                               stdout=log.open("wb"), stderr=subprocess.STDOUT, **as_postgres)  # type: ignore[call-overload]
    cluster = Postgres(directory, port, password, process)
    env = {**os.environ, "PGPASSWORD": password}
    try:
        wait_until(lambda: subprocess.run([str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                                          capture_output=True, check=False).returncode == 0,
                   300, "PostgreSQL", process, log)
        created = subprocess.run([str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "mai",
                                  DATABASE], env=env, capture_output=True, text=True, check=False)
        if created.returncode != 0:
            raise RuntimeError(f"createdb failed: {created.stderr[-2000:]}")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def database_tables(cluster: Postgres) -> list[str]:
    """The tables of the Prefect database (the server's migrations made them there, not in a SQLite file)."""
    listed = subprocess.run([str(postgres_bin() / "psql"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "mai",
                             "-d", DATABASE, "-Atc", "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"],
                            env={**os.environ, "PGPASSWORD": cluster.password}, capture_output=True, text=True,
                            check=True)
    return listed.stdout.split()


@dataclass
class PrefectServer:
    """`prefect server start` on one address, its database in PostgreSQL."""

    api_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        stop_process(self.process)


def start_prefect_server(database_url: str, address: str, directory: Path) -> PrefectServer:
    """The server listens on `address` only (a bridge's address: the simulated hosts reach it there)."""
    port = free_port(address)
    log = directory / "prefect-server.log"
    env = {**os.environ, "PREFECT_API_DATABASE_CONNECTION_URL": database_url, "PREFECT_HOME": str(directory / "home"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}
    env.pop("PREFECT_API_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", address, "--port",
                                str(port), "--no-ui", "--analytics-off"], env=env, stdout=log.open("wb"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    server = PrefectServer(f"http://{address}:{port}/api", process, log)
    try:
        wait_until(lambda: _answers(server.api_url + "/health"), 600, "the Prefect server", process, log)
    except BaseException:
        server.stop()
        raise
    return server


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
