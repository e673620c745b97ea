"""`mai` command line: run configurations, build the built-in assets, query the catalog."""

# The package is argparse over `mai.api`, one module per command group (runs, store, profiles, assets), each
# with `register(commands)`; a handler parses its options, calls the API and prints, nothing more.

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys

# quiet, offline-friendly Prefect defaults for an embedded (serverless) run; the user's env wins. The terminal shows
# warnings and errors; a run's logs in Prefect (its Logs tab) get its INFO decisions too: the plan, the drains and
# shards, the hosts taken out
os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# the first start of the embedded Prefect API migrates a fresh database: more than the default 20 s here (an
# in-process caller that imported Prefect before this module runs Prefect's own temporary server)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from mai import stop
from mai.cli import assets, benchmarks, profiles, report, runs, store, worker
from mai.cli.expected_failures import quiet_expected_failures
from mai.errors import ConfigError, RunFailed
from mai.storage.damage import DamagedFileError

# `mai --help` lists the commands in this order (the order they were introduced), across the groups
ORDER = ("demo", "run", "sql", "sweep", "speculative", "score", "rescore", "profile", "import-profile", "estimate",
         "build-models", "build-shapes", "build-demo", "serve", "regress", "baseline", "catalog", "compare",
         "policies", "report", "parity", "benchmarks", "benchmark", "worker", "time")


# the commands whose work may run as Prefect flows (each starts or finds its Prefect API only when a flow is about
# to run: mai/flows/prefect_api.py; the others read the store, or serve)
FLOW_COMMANDS = frozenset({"demo", "run", "sweep", "speculative", "regress", "profile", "estimate"})

# the commands that read the store's tables: after one succeeds, each file of the store that cannot be read (left out
# of every listing, so the command worked over the rest: storage/damage.py) is named once, with what to run
READS_STORE = frozenset({"demo", "run", "sql", "sweep", "speculative", "rescore", "estimate", "regress", "baseline",
                         "catalog", "compare", "policies", "report", "parity", "store"})

# the exit status of a command stopped by SIGTERM (128 + the signal's number, as a shell reports it)
EXIT_STOPPED = 128 + signal.SIGTERM


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in FLOW_COMMANDS:
        quiet_expected_failures(_OS_HINTS)  # a read-only store or a full disk mid-flow: one line, no traceback
    try:
        with stop.on_sigterm(then_raise=True):
            result: int = args.handler(args)
            sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
            for line in _store_damage(args):  # each file of the store that could not be read, named once
                print(f"note: {line}; this command went on without it", file=sys.stderr)
        return result
    except ConfigError as error:
        print(f"error: {_error_line(args, error)}", file=sys.stderr)
        return 2
    except RunFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return _reader_gone()
    except OSError as error:
        if stop.stop_requested():
            raise
        print(f"error: {_os_error_line(error)}", file=sys.stderr)
        return 1
    except BaseException as error:
        # Ctrl-C is a stop request (mai.stop): a command that runs no flow has nothing to stop, and says only that it
        # was interrupted; a flow command's stop is reported below, as SIGTERM's
        if isinstance(error, KeyboardInterrupt) and (args.command not in FLOW_COMMANDS or not stop.stop_requested()):
            return _interrupted(args.command)
        if not stop.stop_requested():
            from mai.flows.prefect_api import api_lost

            lost = api_lost(error)
            if lost is None:
                raise
            print(f"error: {lost}", file=sys.stderr)
            logging.raiseExceptions = False  # Prefect's services, stopping at exit, would report the dead API again
            logging.disable(logging.CRITICAL)
            return 1
        # whatever the stop surfaced as (StopRequested, Prefect's TerminationSignal, a crashed flow run)
        print(f"error: {stop.reason()}: what the command stored is kept; run it again to complete it",
              file=sys.stderr)
        return EXIT_STOPPED


# the exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 128 + signal.SIGINT


def _interrupted(command: str) -> int:
    """Ctrl-C (SIGINT) that no stop handler took: one line, no traceback (a query's worker process ends with its
    caller, mai/storage/catalog.py)."""
    kept = ": what the command stored is kept; run it again to complete it" if command in FLOW_COMMANDS else ""
    print(f"error: interrupted (Ctrl-C){kept}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _store_damage(args: argparse.Namespace) -> list[str]:
    if args.command not in READS_STORE or not getattr(args, "notes_unreadable", True):
        return []
    from mai.api import store_damage

    return store_damage(args.home)


def _error_line(args: argparse.Namespace, error: ConfigError) -> str:
    """A failure of a command that reads a damaged store names the first damaged file on the same line: it may be
    the cause (a comparison of a run whose scores are lost)."""
    if isinstance(error, DamagedFileError):
        return str(error)
    damage = _store_damage(args)
    return f"{error} (the store is damaged, which may be why: {damage[0]})" if damage else str(error)


# what to do about the expected failures of the file system, by errno
_OS_HINTS = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space (disk quota)",
             errno.EROFS: "the store is on a read-only file system: point --home (or MAI_HOME) at a writable one",
             errno.EACCES: "check the permissions of the store (or of the file named)",
             errno.EPERM: "check the permissions of the store (or of the file named)"}


def _os_error_line(error: OSError) -> str:
    """One line for a file-system failure (a read-only store, a full disk): what failed and what to do. What the
    command stored before it is kept (every write is atomic), so running it again completes it."""
    where = f": {error.filename}" if error.filename else ""
    hint = _OS_HINTS.get(error.errno or 0, "check the store's disk and permissions")
    return f"{error.strerror or error}{where}; {hint}, then run the command again (what it stored is kept)"


def _reader_gone() -> int:
    """The output's reader closed it (`mai store stats | head`): stop quietly, and point stdout at /dev/null so
    that the interpreter's last flush does not fail again on its way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mai", description=__doc__)
    parser.add_argument("--home", default=None, help="store root (default: $MAI_HOME or ~/.mai)")
    commands = parser.add_subparsers(required=True, metavar="COMMAND", dest="command")
    for group in (runs, store, profiles, assets, report, benchmarks, worker):
        group.register(commands)
    _in_order(commands)
    return parser


def _in_order(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Put the groups' commands back in ORDER for --help and for the choices an unknown command lists."""
    def rank(name: str) -> int:
        return ORDER.index(name) if name in ORDER else len(ORDER)

    for name in sorted(commands.choices, key=rank):
        commands.choices[name] = commands.choices.pop(name)
    commands._choices_actions.sort(key=lambda action: rank(action.dest))
