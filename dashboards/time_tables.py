"""Paper tables 11 and 12 in the paper's layouts, from speedup.sql's rows (each run's estimated and measured time
against Full RT and the large model's R run on the same samples) and the timing sets of `mai time`.

A measured speed-up divides two times taken in one regime (docs/latency.md): each run's time made only of outputs it
computed itself, on one machine, device and engine, with the same batch sizes, under load within one band. A timing
set (`mai time RUN REF`) recomputes both runs' outputs in one regime: where one covers both runs, the cell is the
set's, with how many recomputed outputs were identical to the stored ones. Otherwise, where the stored times are
not one regime, the cell says why and shows the estimate (equation 27, one profile for both sides) instead.

Table 11: per comparison group, the paper's rows Full RT, MAI and speed-up with a column per MAI run (its setting
and model pair), estimated (equation 27, under the named profiles) and measured in two tables, never in one
column: an estimate priced with H100 profiles and a CPU measurement answer different questions.

Table 12: the paper's decoding strategies on one benchmark: the large model's R run, token-level speculative
decoding (`mai speculative`) and MAI, each with its backend, realised batch sizes, acceptance rate, total and
per-sample seconds, speed-up against large R, accuracy without and with S2, MAI's paired test against large R,
where the times were measured, and the load (start, end, max) with a warning beyond the band."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mai.dashboards.charts import DASH, Cell, Section, Table, num, short
from mai.dashboards.groups import given_name, latest, paired_cell, score_cell
from mai.dashboards.rounding import fixed
from mai.dashboards.rows import SpeculativeRow, SpeedupRow, TimingSetRow
from mai.dashboards.saved import load_saved
from mai.dashboards.sections import Store
from mai.dashboards.views import fetch
from mai.storage.rows import RunRow

SPECULATIVE_COMMAND = ("<code>mai speculative --large-model L --small-model S --draft-tokens 4</code> measures "
                       "token-level speculative decoding next to a large-R run")
# the SD row's times: `mai speculative` decodes each request plainly and with drafts, one after the other
SPECULATIVE_TIMED = ("timed by `mai speculative` against its own plain decoding of the same requests, one after the "
                     "other (its machine is not stored)")
# load averages (1 min) further apart than this ratio make two measured times hard to compare
LOAD_RATIO = 2.0


def times(value: float | None) -> str:
    return "-" if value is None else f"{fixed(value, 2)}x"


def machine_of(run: RunRow | None) -> tuple[str, float | None]:
    """(host and hardware, the 1-minute load average at the run's start); 'machine not recorded' for runs stored
    without them, or a run the store does not know (None: e.g. an interrupted run whose outputs a later run
    reused)."""
    machine = json.loads(run["provenance_json"] or "{}").get("machine") if run else None
    if not machine:
        return "machine not recorded", None
    load = machine["load_at_start"]
    return f"{machine['host']} ({machine['hardware']})", load[0] if load else None


def measured_note(runs: Sequence[RunRow | None]) -> str:
    """Where and under what load the runs were timed, with a warning when they differ."""
    machines = [machine_of(r) for r in runs]
    hosts = sorted({m for m, _ in machines})
    loads = [load for _, load in machines if load is not None]
    spread = f"{min(loads):g}" + (f"-{max(loads):g}" if max(loads) > min(loads) else "") if loads else ""
    note = "measured on " + "; ".join(hosts) + (f", load {spread}" if loads else "")
    if len(hosts) > 1:
        note += ": WARNING, timed on different machines"
    elif loads and min(loads) > 0 and max(loads) / min(loads) > LOAD_RATIO:
        note += ": WARNING, timed under load that differs more than 2x"
    return note


@dataclass(frozen=True)
class Timings:
    """Which runs' machines a measured time depends on (a run's time adds up the wall time of the generations and
    captures it used, each stored by the run that computed it: speedup.sql's `timed_runs`), every run's speedup.sql
    row, and the timing sets of `mai time` (set -> run -> its recomputed time), oldest first."""

    runs: dict[str, RunRow]                # every completed run in the store
    computed_by: dict[str, list[str]]      # run -> the runs that computed what its measured time adds up
    rows: dict[str, SpeedupRow] = field(default_factory=dict)
    sets: dict[str, dict[str, TimingSetRow]] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # run -> '3 of 41 outputs missing' (Store.lost)

    @classmethod
    def of(cls, store: Store, rows: Iterable[SpeedupRow]) -> Timings:
        listed = list(rows)
        sets: dict[str, dict[str, TimingSetRow]] = {}
        for timed in fetch(store.home, TimingSetRow, load_saved("timing_sets")):
            sets.setdefault(timed["timing_set"], {})[timed["run_id"]] = timed
        return cls({r["run_id"]: r for r in store.all_runs}, {r["run_id"]: list(r["timed_runs"] or []) for r in listed},
                   {r["run_id"]: r for r in reversed(listed)}, sets,
                   {run: lost for run in store.missing if (lost := store.lost(run))})

    def timed_by(self, run_ids: Iterable[str]) -> list[str]:
        """The runs that computed the compared runs' times (a run without stored timings stands for itself)."""
        return sorted({t for run in run_ids for t in self.computed_by.get(run) or [run]})

    def note(self, run_ids: Iterable[str]) -> str:
        """measured_note over the runs that computed the times of `run_ids`, naming them when they are others."""
        compared = list(dict.fromkeys(run_ids))
        timed = self.timed_by(compared)
        note = measured_note([self.runs.get(t) for t in timed])
        others = [t for t in timed if t not in compared]
        return note + (f" (times computed by runs {', '.join(short(t) for t in timed)})" if others else "")

    def timing_set(self, *run_ids: str) -> str | None:
        """The latest timing set that re-timed every one of `run_ids`."""
        return next((name for name, runs in reversed(self.sets.items()) if all(r in runs for r in run_ids)), None)


Reference = Literal["large_r", "full_rt"]


@dataclass(frozen=True)
class Measured:
    """A measured speed-up cell and what it rests on: a timing set's times, or the runs' stored times in one regime.
    Where neither is one regime the cell holds the estimate (equation 27), and where a run's outputs are missing a
    dash; `footnote` then says why, once under the table, and `run_s`, `ref_s` are the estimate's (or None)."""

    run_s: float | None
    ref_s: float | None
    speedup: str
    source: str        # where and how the times were measured
    batches: str       # the run's realised batch sizes per stage
    load: str          # the run's load: start, end, max (or the set's range), warning beyond the band
    footnote: str = ""  # why the cell is no measured number (an estimate stands there, or a dash)
    reason: str = ""    # that reason alone, for a table that shows the estimate in a column of its own


def _against(row: SpeedupRow, reference: Reference) -> tuple[str, float | None, str | None, float | None]:
    """(reference run, measured speed-up, why it is not one regime, estimated speed-up) against large R or Full
    RT."""
    if reference == "large_r":
        return (row["large_r_run_id"] or "", row["measured_speedup_vs_large_r"], row["large_r_mixed"],
                row["estimated_speedup_vs_large_r"])
    return (row["full_rt_run_id"] or "", row["measured_speedup_vs_full_rt"], row["full_rt_mixed"],
            row["estimated_speedup_vs_full_rt"])


def load_cell(start: float | None, end: float | None, low: float | None, high: float | None,
              band: float | None) -> str:
    """'start 3.4, end 3.5, max 3.9', with a warning when the loads seen span more than the band."""
    if high is None:
        return "not recorded"
    cell = (f"start {start:g}, end {end:g}, max {high:g}" if start is not None and end is not None
            else f"{low:g}-{high:g}")
    if beyond_band(low, high, band):
        cell += f": WARNING, beyond one load band ({low:g}-{(low or 0.0) + (band or 0.0):g})"
    return cell


def beyond_band(low: float | None, high: float | None, band: float | None) -> bool:
    return low is not None and high is not None and band is not None and high - low > band


def _set_loads(*timed: TimingSetRow) -> tuple[float | None, float | None, float | None]:
    """(lowest, highest, band width) of the loads every run of a timing set saw: one band is max(lowest, cores)
    wide from the lowest (docs/latency.md), over both sides of a speed-up, not one side's."""
    lows = [t["load_min"] for t in timed if t["load_min"] is not None]
    highs = [t["load_max"] for t in timed if t["load_max"] is not None]
    cores = [t["cpu_count"] for t in timed if t.get("cpu_count") is not None]
    if not lows or not highs:
        return None, None, None
    low = min(lows)
    return low, max(highs), max([low, *(float(c) for c in cores if c is not None)])


def measured(row: SpeedupRow, reference: Reference, timings: Timings) -> Measured:
    """`row`'s run against its large-R or Full RT run: from the latest timing set that re-timed both under one
    load band, else from the stored times if they are one regime and whole, else the estimate (or a dash), with
    the reason as its footnote."""
    ref, speedup, mixed, estimate = _against(row, reference)
    name = timings.timing_set(row["run_id"], ref)
    if name is not None:
        mine, theirs = timings.sets[name][row["run_id"]], timings.sets[name][ref]
        same = mine["identical"] + theirs["identical"] if ref != row["run_id"] else mine["identical"]
        total = mine["outputs"] + theirs["outputs"] if ref != row["run_id"] else mine["outputs"]
        low, high, band = _set_loads(mine, theirs)
        source = f"timing set {name} ({mine['regime']}), identical {same} of {total}"
        batches = f"{mine['realised_batches']} (limits {mine['batch_limits']})"
        load = load_cell(None, None, low, high, band)
        if beyond_band(low, high, band):
            return _instead(row, ref, estimate, f"timing set {name} timed them under loads {low:g}-{high:g}, beyond "
                            f"one load band ({low:g}-{(low or 0.0) + (band or 0.0):g})", source, batches, load)
        return Measured(mine["measured_s"], theirs["measured_s"], times(theirs["measured_s"] / mine["measured_s"]),
                        source, batches, load)
    batches = f"{row['realised_batches']} (limits {row['batch_limits']})"
    load = load_cell(row["load_start"], row["load_end"], row["load_min"], row["load_max"], row["load_band"])
    note = timings.note([row["run_id"], ref])
    lost = [f"run {r}: {timings.lost[r]}" for r in dict.fromkeys((row["run_id"], ref)) if r in timings.lost]
    if lost:
        why = "; ".join(lost) + ": a time over the outputs left would be partial, so none is shown"
        return Measured(None, None, DASH, note, batches, load, why, why)
    if mixed is None and speedup is not None and row["measured_s"]:
        return Measured(row["measured_s"], row["measured_s"] * speedup, times(speedup), note, batches, load)
    return _instead(row, ref, estimate, f"their stored times are not one regime ({mixed})", note, batches, load)


def _instead(row: SpeedupRow, ref: str, estimate: float | None, why: str, source: str, batches: str,
             load: str) -> Measured:
    """The estimate where no measured speed-up of one regime exists, its footnote saying why and how to measure
    one (a dash where no estimate is stored)."""
    command = f"`mai time {row['run_id']} {ref}` re-times both in one regime"
    if estimate is None or row["estimated_s"] is None:
        return Measured(None, None, DASH, source, batches, load,
                        f"no measured speed-up of {row['run_id']} against {ref}: {why}; no estimate stored; {command}",
                        f"{why}; {command}")
    return Measured(row["estimated_s"], row["estimated_s"] * estimate, times(estimate), source, batches, load,
                    f"estimate (equation 27, {row['estimate_name']}), not measured, for {row['run_id']} against "
                    f"{ref}: {why}; {command}", f"{why}; {command}")


def priced_on(prices: str | None, hardware: dict[str, str]) -> str:
    """The hardware an estimate's profiles describe ('H100 (paper tables 3-4)'), from its 'model=profile, ...'."""
    return "; ".join(sorted({hardware.get(p.rsplit("=", 1)[-1], "?") for p in prices.split(", ")})) if prices else "?"


TABLE_11_DIFFERENCES = (
    "The paper's table 11 has a column per benchmark, each a whole benchmark's estimate; here each comparison group "
    "(one benchmark, one sample set) has its own tables with a column per MAI run (setting and model pair) against "
    "the Full RT run on the same samples, estimated and measured in separate tables. The paper's numbers are "
    "estimates only (equation 27, its H100 profiles); the measured table has no counterpart in the paper. A sparse "
    "setting's time includes its attention-capture prefills: measured, their wall time; estimated, one TTFT of the "
    "large model at the capture's input length per capture (estimates made before captures were priced say so).")


def table_11(store: Store, section: Section, rows: list[SpeedupRow], timings: Timings,
             hardware: dict[str, str]) -> None:
    """Per comparison group: the paper's rows Full RT, MAI and speed-up, a column per MAI run with a Full RT run on
    its samples; an estimated table (a column per estimate) and a measured one, never one column for both."""
    mine = [r for r in rows if r["setting"].startswith("MAI") and r["full_rt_run_id"]]
    if not mine:
        section.notes.append("No MAI run with a Full RT run over the same samples in this report: <code>mai run "
                             "--mode full_rt</code> stores one.")
        return
    section.notes.append(TABLE_11_DIFFERENCES)
    runs = {r["run_id"]: r for r in store.all_runs}
    by_group: dict[str, list[SpeedupRow]] = {}
    for r in sorted(mine, key=lambda r: (runs[r["run_id"]]["small_model"] or "", runs[r["run_id"]]["large_model"] or "",
                                         r["setting"], r["run_id"])):  # a pair's columns side by side
        by_group.setdefault(store.sample_sets[r["run_id"]].key, []).append(r)
    for key, group_rows in by_group.items():
        label = store.sample_sets[group_rows[0]["run_id"]].label
        estimated = [r for r in group_rows if r["estimated_s"] is not None
                     and r["estimated_speedup_vs_full_rt"] is not None]
        if estimated:
            section.tables.append(_paper_rows_11(
                store, key, label, estimated, "estimated (equation 27)",
                "estimated total inference time (s), equation 27 under the profiles named",
                [Measured(r["estimated_s"], (r["estimated_s"] or 0.0) * (r["estimated_speedup_vs_full_rt"] or 0.0),
                          times(r["estimated_speedup_vs_full_rt"]), "", "", "") for r in estimated],
                ["priced with", *(f"{r['estimate_name']}: {r['prices']} (profiles of "
                                  f"{priced_on(r['prices'], hardware)})" + (
                                      "; excludes the capture prefills (estimated before they were priced; a new "
                                      "estimate prices them)" if r["estimate_excludes_capture"] else "")
                                  for r in estimated)]))
        timed = list({r["run_id"]: r for r in group_rows if r["measured_s"]}.values())
        if timed:
            cells = [measured(r, "full_rt", timings) for r in timed]
            section.tables.append(_paper_rows_11(
                store, key, label, timed, "measured (wall time)",
                "measured total inference time (s), per-call wall time (batch-amortised, model loading excluded) of "
                "one regime: a timing set that re-timed both runs, else the runs' stored times when they are one "
                "regime; otherwise the estimate, marked, with the reason under the table",
                cells, ["measured on", *(c.source for c in cells)], ["load (1 min)", *(c.load for c in cells)]))


def _columns(store: Store, rows: list[SpeedupRow]) -> list[str]:
    """A table-11 column per row, headed as the paper heads it: the MAI setting, the estimate where the run has
    several, and where two runs share a setting the name given with --name (else 'run 1', 'run 2', in order). The
    run ids are in the table's "MAI run" row."""
    per_run = {r["run_id"]: sum(o["run_id"] == r["run_id"] for o in rows) for r in rows}
    names = {r["run_id"]: given_name(r) for r in store.all_runs}
    heads = [store.settings.get(r["run_id"], r["setting"]) + (f" {r['estimate_name']}" if per_run[r["run_id"]] > 1
                                                               else "") for r in rows]
    runs_under = {head: list(dict.fromkeys(r["run_id"] for r, h in zip(rows, heads) if h == head)) for head in heads}

    def column(row: SpeedupRow, head: str) -> str:
        under = runs_under[head]
        if len(under) == 1:
            return head
        position = under.index(row["run_id"]) + 1
        return f"{head} ({names.get(row['run_id']) or f'run {position}'})"

    return [column(row, head) for row, head in zip(rows, heads)]


def _paper_rows_11(store: Store, key: str, label: str, rows: list[SpeedupRow], head: str, caption: str,
                   timed: list[Measured], *provenance: list[Cell]) -> Table:
    """One table-11 table in the paper's rows: Full RT, MAI and Speedup from each column's times (an estimate or a
    dash in a measured table marked, its reason a footnote), the model pair, where the times come from
    (`provenance`: machines, loads), and the Full RT run."""
    columns = _columns(store, rows)
    runs = {r["run_id"]: r for r in store.all_runs}
    table = Table([head, *columns], [], f"{label}: {caption}", wrap=tuple(columns), group=key,
                  narrow=(head, *columns), narrow_rows=3)  # the paper's rows: Full RT, MAI, Speedup

    def seconds(value: float | None, cell: Measured) -> str:
        return table.noted(num(value) if value is not None else DASH, cell.footnote)

    table.rows = [
        ["Full RT (s)", *(seconds(c.ref_s, c) for c in timed)],
        ["MAI (s)", *(seconds(c.run_s, c) for c in timed)],
        ["Speedup", *(table.noted(c.speedup, c.footnote) for c in timed)],
        ["model pair", *(f"{runs[r['run_id']]['small_model']} + {runs[r['run_id']]['large_model']}" for r in rows)],
        *provenance,
        ["MAI run", *(r["run_id"] for r in rows)],
        ["Full RT run", *(r["full_rt_run_id"] for r in rows)]]
    table.runs = sorted({r["run_id"] for r in rows} | {r["full_rt_run_id"] or "" for r in rows})
    return table


# the paper's own columns of table 12, the export's narrow variant (a column of a two-column page)
TABLE_12_NARROW = ("method", "total s (measured)", "s / sample", "speed-up", "score w/o S2", "score w/ S2")


def table_12(store: Store, section: Section, rows: list[SpeedupRow], speculative: list[SpeculativeRow],
             timings: Timings) -> None:
    """Per large-R run that MAI runs compare with: large R, speculative decoding over it, and each MAI run, with
    MAI's paired test against large R, the realised batch sizes, where each speed-up's two times were measured
    (a timing set, or the stored times when one regime; else why, and the estimate), and the load."""
    runs = {r["run_id"]: r for r in store.all_runs}
    by_reference: dict[str, list[SpeedupRow]] = {}
    for r in rows:
        if r["large_r_run_id"] and r["setting"].startswith("MAI") and r["measured_s"]:
            by_reference.setdefault(r["large_r_run_id"], []).append(r)
    if not by_reference:
        section.notes.append("No MAI run has a large-R run over the same samples, dtype, backend and budgets: "
                             "<code>mai run --mode single --single-model large --single-prompt R</code> stores one.")
    columns = ["method", "backend", "batch size (realised)", "accept rate", "total s (measured)", "s / sample",
               "speed-up", "score w/o S2", "score w/ S2", "vs large R w/o S2 (paired)", "run", "measured on",
               "load (1 min)"]
    for reference, mais in by_reference.items():
        large_r, n = runs[reference], store.sample_sets[reference].n
        cells = {m["run_id"]: (m, measured(m, "large_r", timings)) for m in mais}
        table = Table(columns, [], f"{store.sample_sets[reference].label}: HF is this store's transformers "
                      "backend; the times are per-call wall times (model loading excluded) of one regime: a timing "
                      "set that re-timed both runs, or the runs' stored times when they are one regime, else the "
                      "estimate, marked; 'batch size' is what the calls realised, per stage",
                      group=store.sample_sets[reference].key, narrow=TABLE_12_NARROW,
                      scored=("score w/o S2", "score w/ S2"), wrap=("measured on", "speed-up", "load (1 min)"))
        table.runs.append(reference)
        table.rows.append(_row(store, table, f"{large_r['large_model']} R", large_r,
                               _reference_time(reference, list(cells), timings), n, _with_s2(store, large_r)))
        for spec in (s for s in speculative if s["run_id"] == reference):
            table.rows.append([f"SD ({large_r['large_model']} + {spec['small_model']}, k={spec['draft_tokens']})",
                               large_r["backend"], 1, num(spec["acceptance"]), num(spec["speculative_s"]),
                               num((spec["speculative_s"] or 0.0) / spec["samples"]) if spec["samples"] else None,
                               times(spec["speedup"]), *[table.noted(DASH, "speculative decoding is timed, not "
                                                                          "scored: it decodes as large R does")] * 3,
                               reference, SPECULATIVE_TIMED, DASH])
        for mai, cell in cells.values():
            run = runs[mai["run_id"]]
            table.runs.append(run["run_id"])
            row = _row(store, table, f"{store.setting(run)} ({run['large_model']} + {run['small_model']})", run, cell,
                       n, None)
            if run["s2"]:  # MAI +S2 (not in the paper): its score is a 'w/ S2' score
                row[7], row[8] = table.noted(DASH, "MAI +S2 is scored with S2"), row[7]
            else:
                row[8] = table.noted(DASH, "MAI needs no S2 (the paper's dash)")
            base, scored = store.scored(reference), store.scored(run["run_id"])
            row[9] = paired_cell(base, scored) if base and scored else table.noted(DASH, f"{run['run_id']}: not scored")
            table.rows.append(row)
        section.tables.append(_said_once(table, ("measured on", "load (1 min)")))
    if not speculative:
        section.notes.append(f"No speculative-decoding run stored: {SPECULATIVE_COMMAND}.")


def _said_once(table: Table, columns: tuple[str, ...]) -> Table:
    """`table` without those of `columns` whose cell is the same in every row (speculative decoding's aside): said
    once, in a footnote, instead of in every row."""
    for name in columns:
        index = table.columns.index(name)
        values = {str(row[index]) for row in table.rows if row[index] != DASH}
        if len(values) != 1 or len(table.rows) < 2:
            continue
        table.footnotes.append(f"{name}, every row: {values.pop()}")
        table.columns.pop(index)
        for row in table.rows:
            row.pop(index)
    return table


def _reference_time(reference: str, compared: list[str], timings: Timings) -> Measured:
    """The large-R row's time: from the timing set its MAI rows use, else its own stored time."""
    name = next((t for run in compared if (t := timings.timing_set(run, reference))), None)
    if name is not None:
        mine = timings.sets[name][reference]
        return Measured(mine["measured_s"], mine["measured_s"], "1.00x",
                        f"timing set {name} ({mine['regime']}), identical {mine['identical']} of {mine['outputs']}",
                        f"{mine['realised_batches']} (limits {mine['batch_limits']})",
                        load_cell(None, None, mine["load_min"], mine["load_max"], mine["load_band"]))
    own = timings.rows.get(reference)
    if own is None:
        return Measured(None, None, "-", measured_note([timings.runs.get(reference)]), "-", "-")
    return measured(SpeedupRow(**{**own, "large_r_run_id": reference}), "large_r", timings)


def _with_s2(store: Store, run: RunRow) -> RunRow | None:
    """The same single-model run with S2, over the same samples (the paper's 'w/ S2' column)."""
    return latest(store.all_runs, lambda r: r["mode"] == run["mode"] and r["s2"] and r["single_model"] ==
                  run["single_model"] and r["single_prompt"] == run["single_prompt"] and r["large_model"] ==
                  run["large_model"] and store.sample_sets.get(r["run_id"]) == store.sample_sets.get(run["run_id"]))


def _row(store: Store, table: Table, method: str, run: RunRow, cell: Measured, n: int, with_s2: RunRow | None
         ) -> list[Cell]:
    scored, scored_s2 = store.scored(run["run_id"]), store.scored(with_s2["run_id"]) if with_s2 else None
    return [method, run["backend"], cell.batches, table.noted(DASH, "accept rate: speculative decoding only"),
            table.noted(num(cell.run_s) if cell.run_s is not None else DASH, cell.footnote),
            table.noted(num(cell.run_s / n) if cell.run_s is not None and n else DASH, cell.footnote),
            table.noted(cell.speedup, cell.footnote),
            score_cell(scored) if scored else table.noted(DASH, f"{run['run_id']}: not scored"),
            score_cell(scored_s2) if scored_s2 else table.noted(DASH,
                                                                f"{method} with S2: not stored over these samples"),
            table.noted(DASH, "large R is the reference of the paired test"),
            run["run_id"], cell.source, cell.load]
