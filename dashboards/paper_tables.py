"""Paper tables 5, 7 and 8 (and 13, 14 for the InternVL family) laid out as the paper lays them out, and the runs'
own record: each run's provenance and the share of answers no parser could read, per run and stage (the paper's
reason for S2).

A model's family is the one its runs recorded when they ran (mai.provenance: the checkpoint's config.json, read
where the run resolved the model), never a path read at report time: tables 5 and 7 show every family but
InternVL, tables 13 and 14 the InternVL family, so the InternVL tables fill in as soon as such runs are stored.
Every table is one comparison group's (mai.dashboards.groups)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import partial

from mai.dashboards.charts import Section, Table, mark
from mai.dashboards.groups import (
    INTERNVL,
    SampleSet,
    group_caption,
    latest,
    paired_cell,
    score_cell,
    scores_grid,
)
from mai.dashboards.paper_internvl import (
    TABLE_13_TOKENS,
    TABLE_14_SCORES,
    PaperTable,
    paper_value,
    reference_table,
)
from mai.dashboards.provenance import Provenance
from mai.dashboards.rounding import fixed
from mai.dashboards.rows import StageParseRow, TokensByKindRow
from mai.dashboards.sections import Store
from mai.dashboards.views import FULL_RT, USED_GENERATIONS, fetch, run_label, run_models
from mai.storage.rows import RunRow
from mai.types import STAGE_NAMES

PROMPTS = ("S", "E", "R")
INTERNVL_COMMAND = ("<code>mai run --benchmark BENCH --mode single --single-model large --single-prompt S "
                    "--large-model mai-tiny-internvl-large</code> (and prompts E, R; the small model likewise)")

TOKENS_BY_KIND = f"""
    WITH used AS (
        SELECT DISTINCT u.gen_id, ru.benchmark FROM ({USED_GENERATIONS}) u JOIN runs ru USING (run_id)
        WHERE list_contains(?, u.run_id)
    )
    SELECT g.model, used.benchmark, g.prompt_kind, count(*) AS generations, avg(g.output_tokens) AS mean_output_tokens
    FROM used JOIN generations g USING (gen_id) GROUP BY ALL ORDER BY ALL
"""
# per run and stage: the generations the run used and how many of their answers no parser read (answer_<stage>
# is NULL where the stage ran); small R's answer is the one read after its reasoning (MV2 compares it)
_OUTPUTS = ", ".join(f"{{'gen': gen_{s}, 'answer': answer_{s}}} AS {s}" for s in STAGE_NAMES)
STAGE_PARSE = f"""
    WITH stages AS (
        UNPIVOT (SELECT run_id, sample_id, {_OUTPUTS} FROM routes WHERE list_contains(?, run_id))
        ON {", ".join(STAGE_NAMES)} INTO NAME stage VALUE out
    )
    SELECT run_id, stage, count(*) AS outputs, count(*) FILTER (WHERE out.answer IS NULL) AS unparsed
    FROM stages WHERE out.gen IS NOT NULL GROUP BY ALL ORDER BY run_id, stage
"""


def _is_internvl(store: Store, model: str | None) -> bool:
    return store.family(model) == INTERNVL


def tokens_and_scores(store: Store) -> Section:
    section = Section("paper-tables", "Generated tokens and performance per model (tables 5, 7, 8, 13, 14)",
                      "Mean output tokens per model and prompt (S: simple, E: explain, R: reason) over the "
                      "generations this report's runs used, the single-model scores per prompt (headline metric, "
                      "default scorer profile, %, with its 95 % interval and n), and reasoning transfer: the large "
                      "model answering after the small model's reasoning (Full RT) against the large model's own S "
                      "and R answers. One table per comparison group (benchmark and sample set): a cell never reads "
                      "a run over other samples. Families are the ones the runs recorded from each checkpoint's "
                      "config.json when they ran.")
    groups, every_group = store.groups(), store.groups(store.all_runs)
    table_5 = section.child("table-5", "Table 5 · Mean generated tokens per model and prompt")
    table_7 = section.child("table-7", "Table 7 · Performance per model and prompt (%)")
    table_8 = section.child("table-8", "Table 8 · Reasoning transfer: large model + small model's reasoning (%), "
                                       "change against the large model's S")
    table_13 = section.child("table-13", "Table 13 · Mean generated tokens per model and prompt (InternVL family)")
    table_14 = section.child("table-14", "Table 14 · Performance per model and prompt (InternVL family, %)")
    for group, runs in groups.items():
        ids = [r["run_id"] for r in runs]
        tokens = fetch(store.home, TokensByKindRow, TOKENS_BY_KIND, [ids]) if ids else []
        internvl = [r for r in runs if _is_internvl(store, r["large_model"] if r["mode"] != "single"
                                                    else run_models(r))]  # the caption names the table's models
        _tokens_table(table_5, group, [r for r in runs if r not in internvl],
                      [t for t in tokens if not _is_internvl(store, t["model"])])
        _tokens_table(table_13, group, internvl, [t for t in tokens if _is_internvl(store, t["model"])],
                      TABLE_13_TOKENS)
        singles = [r for r in runs if r["mode"] == "single" and r["run_id"] in store.headline]
        why_missing = partial(store.elsewhere, group)
        scores_grid(table_7, group, [r for r in singles if not _is_internvl(store, run_models(r))], store.scored,
                    missing=why_missing)
        scores_grid(table_14, group, [r for r in singles if _is_internvl(store, run_models(r))], store.scored,
                    TABLE_14_SCORES, why_missing)
        _transfer_table(store, table_8, group, runs, every_group.get(group, runs))
    for part, missing in ((table_5, ""), (table_13, INTERNVL_COMMAND), (table_7, ""), (table_14, INTERNVL_COMMAND)):
        if not part.tables:
            kind = "generations" if part in (table_5, table_13) else "single-model run"
            part.notes.append(f"No {kind} of these models in this report: " + (
                missing or "<code>mai run --mode single --single-model large --single-prompt S</code> (and E, R)")
                + ".")
    if not table_8.tables:
        table_8.notes.append("No Full RT run in this report: <code>mai run --mode full_rt</code> stores one.")
    table_7.notes.append("The paper's table 7 has a column per benchmark and prompt; here each benchmark and sample "
                         "set is its own table, with E and R both without and with S2 (the paper's small-model E "
                         "and R are S2 numbers).")
    table_8.notes.append("The paper's table 8 has a column per benchmark and, per large model, a row for its S, its R "
                         "and each transfer to it, after the small models' R rows, with the change against S inside "
                         "the transfer's cell. Here each benchmark and sample set is its own table; every model pair "
                         "with a Full RT run there has its own four rows (small R, large S, large R, Full RT), each "
                         "naming its model(s), and the change and the paired test against large S are columns. The "
                         "baselines are runs without S2 (the paper's 2-stage strategy).")
    table_13.notes.append("E and R count the reasoning generation only: S2's answer pass is a generation of its own "
                          "(kind S2), not counted here, so the count is the same with or without S2. The paper does "
                          "not say whether its table 13 counts S2's tokens.")
    table_13.tables.append(reference_table(TABLE_13_TOKENS, "mean generated tokens"))
    table_14.tables.append(reference_table(TABLE_14_SCORES, "scores (%; E and R with its 2-stage strategy S2, but "
                                                            "MMMU's E and R, without it)"))
    return section


def _with_paper(measured: float, paper: PaperTable | None, model: str, benchmark: str, prompt: str) -> str:
    """A measured value, with the paper's beside it where the paper ran the same model on the same benchmark."""
    reference = paper_value(paper, model, benchmark, prompt) if paper else None
    return f"{fixed(measured, 1)}" + (f" (paper {fixed(reference, 1)})" if reference is not None else "")


def _tokens_table(section: Section, group: SampleSet, runs: list[RunRow], tokens: list[TokensByKindRow],
                  paper: PaperTable | None = None) -> None:
    """Mean output tokens per model and prompt over the generations the group's runs used. A cell over fewer
    generations than the group has samples (a cascade reasons only where MV1 disagreed) is marked: the paper
    averages each prompt over every sample of the benchmark."""
    rows: dict[str, dict[str, str]] = defaultdict(dict)
    fewer = False
    for t in tokens:
        if t["prompt_kind"] in PROMPTS:
            part = t["generations"] < group.n
            fewer |= part
            rows[t["model"]][t["prompt_kind"]] = (_with_paper(t["mean_output_tokens"], paper, t["model"],
                                                              t["benchmark"], t["prompt_kind"])
                                                  + f" n={t['generations']}" + (mark(1) if part else ""))
    if rows:
        table = Table(["model", *PROMPTS], [[m, *(c.get(p, "not generated") for p in PROMPTS)]
                                            for m, c in sorted(rows.items())],
                      f"{group_caption(group, runs)}: mean output tokens per generation (n generations)",
                      group=group.key, runs=[r["run_id"] for r in runs])
        if fewer:
            table.footnotes.append(f"Over the n generations the runs used, fewer than the group's {group.n} samples "
                                   "(a cascade reasons only on the samples MV1 did not settle); the paper's table "
                                   "averages each prompt over every sample of the benchmark.")
        section.tables.append(table)


def _transfer_table(store: Store, section: Section, group: SampleSet, runs: list[RunRow],
                    baselines: list[RunRow]) -> None:
    """Per model pair with a Full RT run in the group, the paper's rows: the small model's R, the large model's S
    and R, and the large model answering after the small model's reasoning (Full RT), with Full RT's change
    against large S and the paired test on the group's samples. The baselines may lie outside the report's runs
    (`baselines`: every run of the group)."""
    full = [r for r in runs if r["mode"] == "full_rt" and r["transfer"] == "full" and not r["s2"]
            and r["run_id"] in store.headline]
    pairs = sorted({(r["small_model"] or "", r["large_model"] or "") for r in full})
    if not pairs:
        return
    table = Table(["setting", "model(s)", "score %", "relative change vs large S", "difference vs large S"], [],
                  f"{group_caption(group, full)}: headline score %, 95 % interval, n; relative change: score / large "
                  "S's score - 1 (as the paper's table 8); difference: in points on the same samples, with the "
                  "two-sided exact test", group=group.key, scored=("score %",))

    def single(model: str, prompt: str) -> Callable[[RunRow], bool]:
        return lambda r: (r["mode"] == "single" and not r["s2"] and r["single_prompt"] == prompt
                          and run_models(r) == model and r["run_id"] in store.headline)

    def transfer_of(small: str, large: str) -> Callable[[RunRow], bool]:
        return lambda r: r in full and r["small_model"] == small and r["large_model"] == large

    for small, large in pairs:
        large_s = latest(baselines, single(large, "S"))
        base = store.scored(large_s["run_id"]) if large_s else None
        settings: list[tuple[str, str, Callable[[RunRow], bool]]] = [
            ("small R", small, single(small, "R")), ("large S", large, single(large, "S")),
            ("large R", large, single(large, "R")),
            (FULL_RT, f"{large} + {small} R", transfer_of(small, large))]
        for setting, model, matches in settings:
            run = latest(runs if setting == FULL_RT else baselines, matches)
            scored = store.scored(run["run_id"]) if run else None
            if run is None or scored is None:
                table.rows.append([setting, model, store.elsewhere(group, matches), None, None])
                continue
            table.runs.append(run["run_id"])
            change = paired = None
            if setting != "large S" and base is not None:
                change = (f"{fixed(100 * (scored.value / base.value - 1), 1, sign=True)} % (relative)"
                          if base.value else None)
                paired = paired_cell(base, scored)
            table.rows.append([setting, model, score_cell(scored), change, paired])
    section.tables.append(table)


def runs_record(store: Store) -> Section:
    section = Section("runs", "Runs: provenance and unparsed answers",
                      "What each run was made with, as stored with it, and the share of each stage's answers no "
                      "parser could read (the paper adds S2 because the small model's answer after its own "
                      "reasoning is often unparsable).")
    table = Table(["run", "setting", "token budgets", "dtype, backend", "scorer profile", "models @ revision",
                   "data", "command", "machine", "code"], [], "Provenance",
                  wrap=("token budgets", "models @ revision", "data", "command", "machine", "code"))
    for run in store.runs:
        p = Provenance.of(run)
        table.rows.append([run["run_id"], run_label(run), p.budgets, f"{p.dtype}, {p.backend}", p.scorer_profile,
                           p.revisions, p.data, p.command, p.machine, f"{p.code}; {p.packages}"])
    section.tables.append(table)
    parsed = fetch(store.home, StageParseRow, STAGE_PARSE, [store.run_ids])
    labels = {r["run_id"]: run_label(r) for r in store.runs}
    section.tables.append(Table(
        ["run", "setting", "stage", "answers", "unparsed", "unparsed %"],
        [[r["run_id"], labels.get(r["run_id"]), r["stage"], r["outputs"], r["unparsed"],
          f"{fixed(100 * r['unparsed'] / r['outputs'], 1)}" if r["outputs"] else None] for r in parsed],
        "Unparsed answers per run and stage"))
    return section
