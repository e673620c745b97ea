"""Tables 11 and 12 name where a measured time was measured: the machines and load averages of the runs that
computed the generations and captures it adds up (a run reusing another run's outputs is timed where and when
those were computed), warning when they differ."""

from __future__ import annotations

import json
from typing import cast

from mai.dashboards.time_tables import Timings, measured_note
from mai.storage.rows import RunRow


def stored_run(run_id: str, host: str, load: float | None) -> RunRow:
    """A run as the `runs` view gives it, with only what the notes read (its recorded machine)."""
    machine = {"host": host, "hardware": "Xeon x16", "cpu_count": 16,
               "load_at_start": [load, load, load] if load is not None else [], "load_at_end": []}
    return cast("RunRow", {"run_id": run_id, "provenance_json": json.dumps({"machine": machine})})


def timings(runs: list[RunRow], computed_by: dict[str, list[str]]) -> Timings:
    return Timings({r["run_id"]: r for r in runs}, computed_by)


def test_a_reused_time_is_noted_with_the_machine_and_load_of_the_run_that_computed_it() -> None:
    cascade, s2, large_r = (stored_run("r-casc00", "box-a", 1.0), stored_run("r-0000s2", "box-a", 15.0),
                            stored_run("r-large0", "box-a", 1.2))
    # MAI +S2 ran at load 15 but reused the cascade's outputs, computed at load 1, and computed only its S2 stage
    times = timings([cascade, s2, large_r], {"r-casc00": ["r-casc00"],
                                             "r-0000s2": ["r-casc00", "r-0000s2"],
                                             "r-large0": ["r-large0"]})
    assert times.note(["r-casc00", "r-large0"]) == "measured on box-a (Xeon x16), load 1-1.2"
    note = times.note(["r-0000s2"])  # its own time mixes two loads: the warning fires on one run
    assert note.startswith("measured on box-a (Xeon x16), load 1-15: WARNING, timed under load that differs")
    assert note.endswith("(times computed by runs 0000s2, casc00)")  # named, since not only the run itself


def test_a_time_computed_on_another_machine_or_by_an_unknown_run_warns() -> None:
    here, there = stored_run("r-here00", "box-a", 2.0), stored_run("r-there0", "box-b", 2.0)
    times = timings([here, there], {"r-here00": ["r-here00"], "r-there0": ["r-there0", "r-gone00"]})
    assert times.note(["r-here00", "r-there0"]).endswith("WARNING, timed on different machines (times computed "
                                                          "by runs gone00, here00, there0)")
    assert times.timed_by(["r-unpric"]) == ["r-unpric"]  # no stored timing: the run stands for itself
    assert measured_note([None]) == "measured on machine not recorded"
