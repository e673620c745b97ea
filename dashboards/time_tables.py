"""Paper tables 11 and 12 in the paper's layouts, from speedup.sql's rows (each run's estimated and measured time
against Full RT and the large model's R run on the same samples).

Table 11: per model pair and comparison group, the rows Full RT, MAI and speed-up, estimated (equation 27, under
the named profiles) and measured (this store's per-call wall time) never in one row: an estimate priced with H100
profiles and a CPU measurement answer different questions. Every measured row names the machine and its load
average when the runs ran (run-time provenance), and says when the two runs were timed on different machines or
under very different load.

Table 12: the paper's decoding strategies on one benchmark: the large model's R run, token-level speculative
decoding (`mai speculative`) and MAI, each with its backend, batch size, acceptance rate, total and per-sample
seconds, speed-up against large R, and accuracy without and with S2."""

from __future__ import annotations

import json
from typing import TypedDict

from mai.dashboards.charts import Cell, Section, Table, num, short
from mai.dashboards.groups import score_cell
from mai.dashboards.rows import SpeculativeRow, SpeedupRow
from mai.dashboards.sections import Store
from mai.dashboards.views import fetch
from mai.storage.rows import RunRow

SPECULATIVE_COMMAND = ("<code>mai speculative --large-model L --small-model S --draft-tokens 4</code> measures "
                       "token-level speculative decoding next to a large-R run")
# load averages (1 min) further apart than this ratio make two measured times hard to compare
LOAD_RATIO = 2.0


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def machine_of(run: RunRow) -> tuple[str, float | None]:
    """(host and hardware, the 1-minute load average at the run's start), '?' for runs stored without them."""
    machine = json.loads(run["provenance_json"] or "{}").get("machine")
    if not machine:
        return "machine not recorded", None
    load = machine["load_at_start"]
    return f"{machine['host']} ({machine['hardware']})", load[0] if load else None


def measured_note(runs: list[RunRow]) -> str:
    """Where and under what load the runs were timed, with a warning when they differ."""
    machines = [machine_of(r) for r in runs]
    hosts = sorted({m for m, _ in machines})
    loads = [load for _, load in machines if load is not None]
    note = "measured on " + "; ".join(hosts) + (
        f", load {min(loads):g}-{max(loads):g}" if loads else "")
    if len(hosts) > 1:
        note += ": WARNING, timed on different machines"
    elif loads and min(loads) > 0 and max(loads) / min(loads) > LOAD_RATIO:
        note += ": WARNING, timed under load that differs more than 2x"
    return note


PROFILE_HARDWARE = "SELECT DISTINCT profile_name, coalesce(hardware, '?') AS hardware FROM latency_profiles"


class ProfileHardwareRow(TypedDict):
    profile_name: str
    hardware: str


def profile_hardware(store: Store) -> dict[str, str]:
    """Latency profile -> the hardware it was measured on (or published for)."""
    return {r["profile_name"]: r["hardware"] for r in fetch(store.home, ProfileHardwareRow, PROFILE_HARDWARE)}


def priced_on(prices: str | None, hardware: dict[str, str]) -> str:
    """The hardware an estimate's profiles describe ('H100 (paper tables 3-4)'), from its 'model=profile, ...'."""
    if not prices:
        return "?"
    return "; ".join(sorted({hardware.get(p.rsplit("=", 1)[-1], "?") for p in prices.split(", ")}))


def table_11(store: Store, section: Section, rows: list[SpeedupRow]) -> None:
    """Per MAI run with a Full RT run on its samples: Full RT, MAI and the speed-up, estimated and measured."""
    runs = {r["run_id"]: r for r in store.all_runs}
    mine = [r for r in rows if r["setting"].startswith("MAI") and r["full_rt_run_id"]]
    if not mine:
        section.notes.append("No MAI run with a Full RT run over the same samples in this report: <code>mai run "
                             "--mode full_rt</code> stores one.")
        return
    tables: dict[str, Table] = {}
    done: set[str] = set()
    hardware = profile_hardware(store)
    for r in mine:
        run, full_rt = runs[r["run_id"]], runs[r["full_rt_run_id"] or ""]
        group = store.sample_sets[r["run_id"]]
        table = tables.setdefault(group.key, Table(
            ["model pair", "MAI setting", "MAI run", "quantity", "Full RT", "MAI", "speed-up", "measured on"], [],
            f"{group.label}: estimated (equation 27, under the profiles named) and measured (this store's wall "
            "time) are separate rows, never to be compared with each other", wrap=("quantity", "measured on"),
            group=group.key))
        pair = f"{run['small_model']} + {run['large_model']}"
        if r["estimated_s"] is not None and r["estimated_speedup_vs_full_rt"] is not None:
            priced = f"estimated s ({r['prices']}; profiles of {priced_on(r['prices'], hardware)})"
            table.rows.append([pair, r["setting"], short(r["run_id"]), priced,
                               num(r["estimated_s"] * r["estimated_speedup_vs_full_rt"]), num(r["estimated_s"]),
                               times(r["estimated_speedup_vs_full_rt"]), "-"])
        if r["run_id"] not in done and r["measured_s"] and r["measured_speedup_vs_full_rt"] is not None:
            done.add(r["run_id"])
            table.rows.append([pair, r["setting"], short(r["run_id"]), "measured s", num(r["measured_s"] *
                                                                     r["measured_speedup_vs_full_rt"]),
                               num(r["measured_s"]), times(r["measured_speedup_vs_full_rt"]),
                               measured_note([run, full_rt])])
        table.runs += [r["run_id"], full_rt["run_id"]]
    section.tables.extend(tables.values())


def table_12(store: Store, section: Section, rows: list[SpeedupRow], speculative: list[SpeculativeRow]) -> None:
    """Per large-R run that MAI runs compare with: large R, speculative decoding over it, and each MAI run."""
    runs = {r["run_id"]: r for r in store.all_runs}
    by_reference: dict[str, list[SpeedupRow]] = {}
    for r in rows:
        if r["large_r_run_id"] and r["setting"].startswith("MAI") and r["measured_s"]:
            by_reference.setdefault(r["large_r_run_id"], []).append(r)
    if not by_reference:
        section.notes.append("No MAI run has a large-R run over the same samples, dtype, backend and budgets: "
                             "<code>mai run --mode single --single-model large --single-prompt R</code> stores one.")
    columns = ["method", "backend", "batch size", "accept rate", "total s (measured)", "s / sample",
               "speed-up", "score w/o S2", "score w/ S2", "run", "measured on"]
    for reference, mais in by_reference.items():
        large_r = runs[reference]
        n = store.sample_sets[reference].n
        plain_s = (mais[0]["measured_s"] or 0.0) * (mais[0]["measured_speedup_vs_large_r"] or 0.0)
        with_s2 = _with_s2(store, large_r)
        table = Table(columns, [], f"{store.sample_sets[reference].label}: HF is this store's transformers "
                      "backend; the times are the runs' stored per-call wall times (model loading excluded)",
                      group=store.sample_sets[reference].key, scored=("score w/o S2", "score w/ S2"),
                      wrap=("measured on",))
        table.runs.append(reference)
        table.rows.append(_row(store, f"{large_r['large_model']} R", large_r, None, plain_s, n, 1.0, with_s2))
        for spec in (s for s in speculative if s["run_id"] == reference):
            table.rows.append([f"SD ({large_r['large_model']} + {spec['small_model']}, k={spec['draft_tokens']})",
                               large_r["backend"], 1, num(spec["acceptance"]), num(spec["speculative_s"]),
                               num((spec["speculative_s"] or 0.0) / spec["samples"]) if spec["samples"] else None,
                               times(spec["speedup"]), "-", "-", reference, measured_note([large_r])])
        for mai in {m["run_id"]: m for m in mais}.values():
            run = runs[mai["run_id"]]
            table.runs.append(run["run_id"])
            row = _row(store, f"{mai['setting']} ({run['large_model']} + {run['small_model']})", run, None,
                       mai["measured_s"], n, mai["measured_speedup_vs_large_r"], None)
            row[8] = "-"  # MAI needs no S2 (the paper's '-')
            table.rows.append(row)
        section.tables.append(table)
    if not speculative:
        section.notes.append(f"No speculative-decoding run stored: {SPECULATIVE_COMMAND}.")


def _with_s2(store: Store, run: RunRow) -> RunRow | None:
    """The same single-model run with S2, over the same samples (the paper's 'w/ S2' column)."""
    found = [r for r in store.all_runs if r["mode"] == run["mode"] and r["s2"] and r["single_model"] ==
             run["single_model"] and r["single_prompt"] == run["single_prompt"] and r["large_model"] ==
             run["large_model"] and store.sample_sets.get(r["run_id"]) == store.sample_sets.get(run["run_id"])]
    return found[-1] if found else None


def _row(store: Store, method: str, run: RunRow, accept: float | None, seconds: float | None, n: int,
         speedup: float | None, with_s2: RunRow | None) -> list[Cell]:
    config = json.loads(run["config_json"] or "{}")
    scored, scored_s2 = store.scored(run["run_id"]), store.scored(with_s2["run_id"]) if with_s2 else None
    return [method, run["backend"], config.get("batch_size"), num(accept) if accept is not None else "N/A",
            num(seconds), num(seconds / n) if seconds is not None and n else None, times(speedup),
            score_cell(scored) if scored else "-", score_cell(scored_s2) if scored_s2 else "not stored",
            run["run_id"], measured_note([run])]
