"""The DuckDB catalog: views over the Parquet files, nothing else. It can be dropped and rebuilt from the
files at any time (`build_catalog`). `mai sql` uses an in-memory database with the same views, so a query
never takes the catalog file's lock and never blocks a running pipeline.

Queries are read-only over the store (`connect`, `query`), in two layers:
- `query` runs only SELECT statements (`duckdb.extract_statements`, statement type SELECT: this covers
  WITH, FROM-first, VALUES, UNPIVOT, DESCRIBE, SHOW, SUMMARIZE) and executes exactly the statements it
  checked. Anything else (COPY, ATTACH, DETACH, CREATE, INSERT, UPDATE, DELETE, DROP, SET / RESET, PRAGMA,
  CALL, INSTALL / LOAD, EXPORT / IMPORT, EXPLAIN, PREPARE / EXECUTE, transactions, PIVOT statements, which
  DuckDB runs as several statements) is refused with a ConfigError before anything runs. The type check is
  what stops writes: DuckDB's settings below still let COPY ... TO and ATTACH reach an allowed directory.
- `connect` creates the views, then restricts the connection with DuckDB's own settings (DuckDB 1.3 to
  2.0): `allowed_directories = ['<root>/store/']` and `enable_external_access = false`, so table functions
  (read_csv, read_text, read_blob, glob, read_parquet, ...) read only the store's files: not /etc/passwd,
  not the catalog file, models or datasets, not a URL (DuckDB adds its own temporary-file directory to the
  allowed list, for spilling); `autoinstall_known_extensions = false` and `autoload_known_extensions = false`,
  so no extension is fetched or loaded (enable_external_access already refuses INSTALL and LOAD); and last
  `lock_configuration = true`, so no later SET or RESET can undo any of it."""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import tempfile
import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import duckdb

from mai.errors import ConfigError
from mai.files import atomic_path
from mai.storage.partitions import table_files
from mai.storage.paths import Home
from mai.storage.query_results import UNBOUNDED, ResultRules, Rows, final_rows
from mai.storage.rows import Columns
from mai.storage.tables import TABLES, Table

VIEW_NAMES = tuple(t.name for t in TABLES)  # one view per table, named after it
# The catalog file is written in the storage format of DuckDB 1.4 (the LTS release), which DuckDB 1.4, 1.5 and
# 2.x read; DuckDB writes its own newest format by default, which older clients refuse ("database file with
# version number 69, but we can only read versions between 64 and 68").
CATALOG_STORAGE_VERSION = "v1.4.0"
_STORAGE_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "storage_compatibility_version": CATALOG_STORAGE_VERSION}


def _empty_relation(columns: Columns) -> str:
    """No rows, the table's columns by their types (storage/rows.py names them as DuckDB does)."""
    typed = ", ".join(f"CAST(NULL AS {type_}) AS {name}" for name, type_ in columns)
    return f"SELECT {typed} WHERE false"


def _over_listed(files: list[Path], columns: Columns) -> str:
    """The files by their exact paths, listed here (never a glob: a store under a directory named `a[1]` or
    `x*` would match other files or none), each a quoted SQL string. `union_by_name` keeps old files readable
    when a later version adds columns."""
    if not files:
        return _empty_relation(columns)
    listed = ", ".join(_sql_string(_glob_literal(f.as_posix())) for f in files)
    return f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"


def _glob_literal(path: str) -> str:
    """DuckDB expands `*`, `?` and `[` in every name given to read_parquet, a list of files included: each is
    written as a one-character class, which matches only itself. A path with a backslash is given as it is:
    DuckDB's globbing splits a path at backslashes as at slashes (so no pattern names a file whose name holds
    one, and an escaped name such as `jb\\[[]x` matches nothing), and when a pattern matches nothing DuckDB opens
    the name as written, which is this file. (It could read another file only where the path with each backslash
    read as a slash, globbed, names one: `jb/[x...` beside `jb\\[x`.)"""
    if "\\" in path:
        return path
    return "".join(f"[{char}]" if char in "*?[" else char for char in path)


def view_definition(home: Home, table: Table, read_root: Path | None = None) -> str:
    """A content-addressed table is read plainly (a query reads only the columns it touches): identities are
    claimed, so each is written once, and compaction removes the duplicates of older stores. `read_root` names
    the store directory by another path (`_plain_alias`)."""
    files = table_files(home, table)
    if read_root is not None:
        files = [read_root / _inside(f, home.store) for f in files]
    # the published version of each partition, by its version directory (storage/partitions.py): a view keeps
    # reading the version it was made over even when a compaction publishes the next one meanwhile
    relation = _over_listed(files, table.columns)
    if table.full_schema_view:  # BY NAME over the full schema: columns added later are NULL in older files
        relation = f"SELECT * FROM ({_empty_relation(table.columns)} UNION ALL BY NAME {relation})"
    if table.keep_first_by:
        keys = ", ".join(table.key)
        relation = (f"SELECT * FROM ({relation}) "
                    f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {table.keep_first_by}) = 1")
    if table.per_run:  # a run killed before its `runs` row does not count
        relation = f"SELECT * FROM ({relation}) WHERE run_id IN (SELECT run_id FROM runs)"
    return relation


def _inside(path: Path, store: Path) -> Path:
    """`path` relative to the store directory (a partition's files are named by their resolved version path)."""
    try:
        return path.relative_to(store)
    except ValueError:
        return path.relative_to(store.resolve())


def _create_views(connection: duckdb.DuckDBPyConnection, home: Home, read_root: Path | None = None) -> None:
    for table in TABLES:  # in the registry's order: a view is created after the views it reads
        connection.execute(f"CREATE OR REPLACE VIEW {table.name} AS {view_definition(home, table, read_root)}")


def _plain_alias(store: Path) -> Path:
    """A path to the store directory without `*`, `?`, `[` or a backslash. DuckDB checks `allowed_directories`
    against a name before it expands globs in it, so under such a directory a file can be named neither plainly
    (it is globbed: `a[1]` means `a1`) nor escaped (`a[[]1]` is not inside the allowed directory). The alias is a
    symbolic link in a directory of this user's under the temp directory, one per store, made atomically."""
    if not any(char in store.as_posix() for char in "*?[\\"):
        return store
    links = Path(tempfile.gettempdir()) / f"mai-sql-{os.getuid()}"
    links.mkdir(mode=0o700, exist_ok=True)
    if links.is_symlink() or links.stat().st_uid != os.getuid():
        raise ConfigError(f"{links} is not a directory of this user's: remove it, or set TMPDIR elsewhere")
    target = store.absolute()
    alias = links / hashlib.sha256(target.as_posix().encode()).hexdigest()[:24]
    if not (alias.is_symlink() and Path(os.readlink(alias)) == target):
        with atomic_path(alias) as temp:
            os.symlink(target, temp)
    return alias


def build_catalog(home: Home) -> Path:
    """(Re)create the catalog file's views. Safe to run at any time, by any number of runs at once: the views
    are written to a new file that then replaces the catalog (`os.replace`), so no run ever takes the catalog
    file's lock, and a notebook that holds the old file open keeps its views (it sees new tables once it
    reconnects). It holds no data."""
    with atomic_path(home.catalog) as temp, tempfile.TemporaryDirectory(prefix="mai-catalog-") as scratch:
        # DuckDB reads a '?' in a database file's path as the start of URI options (it then writes its WAL
        # elsewhere and fails), so the file is made under a plain temp name and copied into place
        built = Path(scratch) / "catalog.duckdb"
        with duckdb.connect(str(built), config=_STORAGE_CONFIG) as connection:
            _create_views(connection, home)
        shutil.copyfile(built, temp)
    return home.catalog


@dataclass(frozen=True)
class QueryLimits:
    """What one `mai sql` query may take: wall time (the connection is interrupted after it) and DuckDB's
    memory limit (a size such as '2GB'; DuckDB spills what it can to its temp directory, then fails the query).
    `memory_limit` None keeps DuckDB's default (80 % of RAM)."""

    timeout_s: float | None = None
    memory_limit: str | None = None
    result: ResultRules = UNBOUNDED  # how much of the result is taken, and how (storage/query_results.py)

    def __post_init__(self) -> None:
        """Only finite positive amounts: a NaN timeout compared false with everything (no limit at all), an
        infinite or huge one overflowed the timer, and DuckDB reads a memory limit of -1GB or 'none' as no limit
        and 0 as no memory."""
        timeout = self.timeout_s
        if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= MAX_QUERY_TIMEOUT_S):
            raise ConfigError(f"the query timeout must be a number of seconds above 0 and at most "
                              f"{MAX_QUERY_TIMEOUT_S:g} (a week), got {timeout:g}")
        size = _MEMORY_SIZE.fullmatch(self.memory_limit) if self.memory_limit is not None else None
        if self.memory_limit is not None and not (size and math.isfinite(float(size[1])) and float(size[1]) > 0):
            raise ConfigError(f"memory limit '{self.memory_limit}' is not a size above 0 (such as 2GB, 512MB)")


MAX_QUERY_TIMEOUT_S = 7 * 24 * 3600.0
# a memory size as DuckDB reads one: a number (decimals and an exponent allowed) and a unit such as GB, MiB or none
_MEMORY_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def connect(home: Home, limits: QueryLimits = QueryLimits()) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the catalog's views, for queries; it can read only the store's files and its
    settings are locked (module docstring)."""
    connection = duckdb.connect(":memory:")
    # each file's footer is read once: the view of every per-run table reads `runs` again, and a query binds the
    # views it names again (a quarter of `mai sql`'s view creation; the store's files are immutable)
    connection.execute("SET parquet_metadata_cache = true")
    store = _plain_alias(home.store)
    try:
        _create_views(connection, home, store)
    except duckdb.Error as error:  # a file that looked whole (storage/damage.py) but whose footer DuckDB cannot read
        connection.close()
        raise ConfigError(f"the store's views cannot be made: {_first_line(error)}; run `mai store verify` to find "
                          "the damaged file and `mai store verify --repair` to move it aside") from error
    _restrict(connection, store, limits)
    return connection


def _first_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _restrict(connection: duckdb.DuckDBPyConnection, store: Path, limits: QueryLimits) -> None:
    allowed = _sql_string(store.as_posix().rstrip("/") + "/")  # a directory prefix: not also store2/
    # DuckDB allows its temp directory too (for spilling); by default that is `.tmp` in the caller's working
    # directory, which a query could then read (read_text('.tmp/...')): it spills into a directory of its own
    spill = _sql_string((Path(tempfile.gettempdir()) / f"mai-sql-{os.getpid()}-{uuid.uuid4().hex}").as_posix())
    settings = [f"SET temp_directory = {spill}"]
    if limits.memory_limit is not None:
        settings.append(f"SET memory_limit = {_sql_string(limits.memory_limit)}")
    settings += [f"SET allowed_directories = [{allowed}]", "SET enable_external_access = false",
                 "SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false",
                 "SET lock_configuration = true"]
    for setting in settings:
        try:
            connection.execute(setting)
        except duckdb.Error as error:  # only a user's value can fail here: the memory limit
            raise ConfigError(f"memory limit '{limits.memory_limit}' is not a size DuckDB reads (such as 2GB, "
                              f"512MB): {error}") from error


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def read_only_statements(sql: str) -> list[duckdb.Statement]:
    """The statements of `sql`, each checked to be a SELECT; a ConfigError names the first that is not."""
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as error:  # bytes of a command line that are not UTF-8 (kept as lone surrogates)
        raise ConfigError(f"the query is not valid UTF-8 text (at character {error.start})") from error
    try:
        statements = duckdb.extract_statements(sql)
    except (duckdb.Error, ValueError) as error:  # ValueError: a statement type the Python API has no name for
        raise ConfigError(f"SQL error: {error}") from error
    if not statements:
        raise ConfigError("the query holds no SQL statement")
    for statement in statements:
        if _statement_kind(statement) != "SELECT":
            shown = " ".join(statement.query.split())
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ConfigError(f"only SELECT queries are allowed over the store (read-only); refused a "
                              f"{_statement_kind(statement)} statement: {shown}")
    return statements


def _statement_kind(statement: duckdb.Statement) -> str:
    """The statement type's name; a type the Python API has no name for (UPDATE EXTENSIONS) is never a SELECT."""
    try:
        return statement.type.name
    except ValueError:
        return "unnamed"


def query(home: Home, sql: str, limits: QueryLimits = QueryLimits()) -> Rows:
    """(columns, rows) of the last statement; `sql` holds SELECT statements only (module docstring). An error
    DuckDB reports, such as a file outside the store, a missing column or a syntax error, is a ConfigError; so is
    a query stopped by `limits`. With a timeout the statements run in a worker process (`_in_worker`), so that the
    timeout holds for any statement and a signal that stops the caller stops the query at once."""
    statements = read_only_statements(sql)
    if limits.timeout_s is None:
        return _answer(home, statements, limits)
    return _in_worker(home, statements, limits, limits.timeout_s)


# how long a worker may run past its timeout before it is killed: DuckDB checks for an interrupt between chunks of
# work, and one huge function call (`length(repeat('x', 1500000000))`: 80 s, 2.9 GB) is one chunk
WORKER_GRACE_S = 1.0


def _answer(home: Home, statements: list[duckdb.Statement], limits: QueryLimits) -> Rows:
    with connect(home, limits) as connection:
        timer = threading.Timer(limits.timeout_s, connection.interrupt) if limits.timeout_s else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            for statement in statements[:-1]:
                connection.execute(statement)
            return final_rows(connection, statements[-1], limits.result)
        except duckdb.InterruptException as error:
            raise ConfigError(_stopped(limits)) from error
        except duckdb.OutOfMemoryException as error:
            raise ConfigError(f"the query needs more memory than its limit of {limits.memory_limit} (raise it "
                              f"with --memory-limit): {error}") from error
        except duckdb.Error as error:
            raise ConfigError(f"SQL error: {error}") from error
        finally:
            if timer is not None:
                timer.cancel()


def _stopped(limits: QueryLimits) -> str:
    return f"the query was stopped after {limits.timeout_s:g} s (raise the limit with --timeout)"


def _in_worker(home: Home, statements: list[duckdb.Statement], limits: QueryLimits, timeout_s: float) -> Rows:
    """`_answer` in a forked worker process (forked: it starts in milliseconds with DuckDB imported and the
    statements parsed; nothing is pickled but the answer). The worker interrupts its own query at the timeout;
    one that has not answered `WORKER_GRACE_S` later is killed, and so is one whose caller stops waiting (SIGTERM
    raises in the waiting main thread, as does Ctrl-C). A worker whose caller dies ends by itself (its lifeline pipe
    closes). The spill directory of a killed worker is removed here."""
    context = multiprocessing.get_context("fork")
    answers, answer_end = context.Pipe(duplex=False)
    lifeline, lifeline_end = context.Pipe(duplex=False)
    worker = context.Process(target=_worker, args=(home, statements, limits, answer_end, lifeline, lifeline_end),
                             name="mai-sql-worker", daemon=True)
    # Ctrl-C reaches the terminal's whole process group: held back while the worker is made, so that it never
    # lands half-way in either process (the worker ignores it once it runs; here it is raised inside the `try`,
    # whose clean-up ends the worker). It came half-way in a test on a loaded machine, and the command hung.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    worker.start()
    answer_end.close()
    lifeline.close()
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        kind, value = answers.recv() if answers.poll(timeout_s + WORKER_GRACE_S) else ("error", _stopped(limits))
    except EOFError:  # killed from outside (the kernel's OOM killer, say)
        kind, value = "error", "the query's worker process ended without an answer (out of memory?)"
    finally:
        lifeline_end.close()
        worker.join(WORKER_GRACE_S)
        if worker.is_alive():
            worker.kill()
            worker.join()
        answers.close()
        for spill in Path(tempfile.gettempdir()).glob(f"mai-sql-{worker.pid}-*"):  # the worker's DuckDB spill
            shutil.rmtree(spill, ignore_errors=True)
    if kind == "error":
        raise ConfigError(str(value))
    return value  # type: ignore[return-value]  # the worker sends (columns, rows) with "rows"


def _worker(home: Home, statements: list[duckdb.Statement], limits: QueryLimits, answers: Connection,
            lifeline: Connection, lifeline_end: Connection) -> None:
    # Ctrl-C reaches the terminal's whole process group: the caller stops and ends this worker (no traceback here);
    # held back until now (the caller's mask, inherited), a Ctrl-C that came meanwhile is ignored too
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    lifeline_end.close()  # the caller's end, inherited: only the caller may hold it open
    threading.Thread(target=_exit_with_caller, args=(lifeline,), daemon=True).start()
    try:
        answer: tuple[str, object] = ("rows", _answer(home, statements, limits))
    except ConfigError as error:
        answer = ("error", str(error))
    except Exception as error:  # noqa: BLE001 (any failure: the caller says it in one line, never a traceback)
        answer = ("error", f"the query failed: {type(error).__name__}: {_first_line(error)}")
    try:
        answers.send(answer)
    except (pickle.PicklingError, TypeError, AttributeError) as error:  # a value pickle cannot carry
        answers.send(("error", f"the query's answer cannot be passed on: {type(error).__name__}: {error}"))


def _exit_with_caller(lifeline: Connection) -> None:
    """Wait until the caller closes its end of the lifeline (done with this worker, or dead), then exit."""
    with suppress(EOFError, OSError):
        lifeline.recv_bytes()
    os._exit(0)


def final_generations(home: Home, run_id: str, scorer_profile: str) -> list[tuple[str, str, str, float]]:
    """(sample_id, prompt kind, text, score) of each scored sample's final generation in a run, under one scorer
    profile (a re-scored run holds one score per profile). Joined through the run's scores: a generation
    reused from the cache keeps the run_id of the run that first made it, so generations filtered by run_id
    would miss it."""
    with connect(home) as connection:
        return connection.execute(
            "SELECT s.sample_id, g.prompt_kind, g.text, s.score FROM scores s "
            "JOIN generations g ON g.gen_id = s.final_gen_id WHERE s.run_id = ? AND s.scorer_profile = ? "
            "ORDER BY s.sample_id", [run_id, scorer_profile]).fetchall()
