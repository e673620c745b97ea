"""`mai server start|stop|status`: the persistent local Prefect server that every later `mai` command of this user
uses when no PREFECT_API_URL is set (mai/flows/local_server.py says why it is never started implicitly)."""

from __future__ import annotations

import argparse

from mai.flows.local_server import running_server, server_dir, start_server, stop_server


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = commands.add_parser("server", help="a persistent local Prefect server for later commands (start, stop, "
                                                "status): saves each command starting a temporary one")
    actions = server.add_subparsers(required=True, metavar="ACTION")
    start = actions.add_parser("start", help="start it (or report the one that runs) and wait until it answers")
    start.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    start.set_defaults(handler=_start)
    actions.add_parser("stop", help="stop it").set_defaults(handler=_stop)
    actions.add_parser("status", help="whether it runs, and where (exit 1 when it does not)").set_defaults(
        handler=_status)


def _start(args: argparse.Namespace) -> int:
    server = start_server(args.port)
    print(f"Prefect server at {server.url} (pid {server.pid}, log {server.log}); the UI is at "
          f"{server.url.removesuffix('/api')}. `mai` commands without PREFECT_API_URL use it; `mai server stop` "
          "ends it.")
    return 0


def _stop(args: argparse.Namespace) -> int:
    stopped = stop_server()
    print(f"stopped the Prefect server at {stopped.url}" if stopped else f"no local Prefect server ({server_dir()})")
    return 0


def _status(args: argparse.Namespace) -> int:
    server = running_server()
    if server is None:
        print(f"no local Prefect server runs ({server_dir()}): commands start a temporary one each; "
              "`mai server start` keeps one")
        return 1
    print(f"Prefect server at {server.url} (pid {server.pid}, log {server.log})")
    return 0
