"""Paper tables 5, 7 and 8 (and 13, 14 for the InternVL family) laid out as the paper lays them out, and the runs'
own record: each run's provenance and the share of answers no parser could read, per run and stage (the paper's
reason for S2).

A model's family is read from its checkpoint's config.json (`model_type`, else `architectures`) at report time:
tables 5 and 7 show every family but InternVL, tables 13 and 14 the InternVL family, so the InternVL tables fill
in as soon as such runs are stored."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from pathlib import Path

from mai.dashboards.charts import Cell, Section, Table
from mai.dashboards.paper_internvl import (
    TABLE_13_TOKENS,
    TABLE_14_SCORES,
    PaperTable,
    paper_value,
    reference_table,
)
from mai.dashboards.provenance import Provenance
from mai.dashboards.rows import StageParseRow, TokensByKindRow
from mai.dashboards.sections import Store
from mai.dashboards.views import FULL_RT, USED_GENERATIONS, fetch, run_label, run_models
from mai.storage.schemas import RunRow

from mai.config import BUILTIN_MODELS, SHIPPED_MODELS, shipped_models_dir

PROMPTS = ("S", "E", "R")
INTERNVL = "internvl"
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
STAGE_PARSE = """
    WITH stages AS (
        UNPIVOT (SELECT run_id, sample_id,
                        {'gen': gen_s_large, 'answer': answer_s_large} AS s_large,
                        {'gen': gen_s_small, 'answer': answer_s_small} AS s_small,
                        {'gen': gen_r_small, 'answer': answer_r_small} AS r_small,
                        {'gen': gen_s2_small, 'answer': answer_s2_small} AS s2_small,
                        {'gen': gen_rt_large, 'answer': answer_rt_large} AS rt_large,
                        {'gen': gen_single, 'answer': answer_single} AS single,
                        {'gen': gen_single_s2, 'answer': answer_single_s2} AS single_s2
                 FROM routes WHERE list_contains(?, run_id))
        ON s_large, s_small, r_small, s2_small, rt_large, single, single_s2 INTO NAME stage VALUE out
    )
    SELECT run_id, stage, count(*) AS outputs, count(*) FILTER (WHERE out.answer IS NULL) AS unparsed
    FROM stages WHERE out.gen IS NOT NULL GROUP BY ALL ORDER BY run_id, stage
"""


@cache
def _config_family(path: Path) -> str | None:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = [str(config.get("model_type") or ""), *(str(a) for a in config.get("architectures") or [])]
    return INTERNVL if any(INTERNVL in n.lower() for n in names) else (names[0] or None)


def model_family(store: Store, model: str) -> str | None:
    """The family of a model as its checkpoint's config.json names it (None where no checkpoint is at hand)."""
    if model in SHIPPED_MODELS:
        return _config_family(shipped_models_dir() / model)
    if model in BUILTIN_MODELS:
        return _config_family(store.home.models / model)
    return _config_family(Path(model).expanduser())


def _is_internvl(store: Store, model: str | None) -> bool:
    return model is not None and model_family(store, model) == INTERNVL


def tokens_and_scores(store: Store) -> Section:
    section = Section("paper-tables", "Generated tokens and performance per model (tables 5, 7, 8, 13, 14)",
                      "Mean output tokens per model and prompt (S: simple, E: explain, R: reason) over the "
                      "generations this report's runs used, the single-model scores per prompt (headline metric, "
                      "default scorer profile, %), and reasoning transfer: the large model answering after the small "
                      "model's reasoning (Full RT) against the large model's own S and R answers.")
    tokens = fetch(store.home, TokensByKindRow, TOKENS_BY_KIND, [store.run_ids])
    qwen = [t for t in tokens if not _is_internvl(store, t["model"])]
    internvl = [t for t in tokens if _is_internvl(store, t["model"])]
    _tokens_table(section.child("table-5", "Table 5 · Mean generated tokens per model and prompt"), qwen)
    singles = [r for r in store.runs if r["mode"] == "single" and r["run_id"] in store.headline]
    _scores_table(store, section.child("table-7", "Table 7 · Performance per model and prompt (%)"),
                  [r for r in singles if not _is_internvl(store, run_models(r))])
    _transfer_table(store, section.child("table-8", "Table 8 · Reasoning transfer: large model + small model's "
                                                    "reasoning (%), change against the large model's S"))
    part = section.child("table-13", "Table 13 · Mean generated tokens per model and prompt (InternVL family)")
    _tokens_table(part, internvl, INTERNVL_COMMAND, TABLE_13_TOKENS)
    part.tables.append(reference_table(TABLE_13_TOKENS, "mean generated tokens"))
    part = section.child("table-14", "Table 14 · Performance per model and prompt (InternVL family, %)")
    _scores_table(store, part, [r for r in singles if _is_internvl(store, run_models(r))], INTERNVL_COMMAND,
                  TABLE_14_SCORES)
    part.tables.append(reference_table(TABLE_14_SCORES, "scores (%; MMMU E and R without its 2-stage strategy)"))
    return section


def _grid(rows: dict[str, dict[tuple[str, str], str]], benchmarks: list[str], first: str) -> Table:
    columns = [(b, p) for b in benchmarks for p in PROMPTS]
    return Table([first, *(f"{b} {p}" for b, p in columns)],
                 [[name, *(cells.get(c) for c in columns)] for name, cells in sorted(rows.items())])


def _with_paper(measured: float, paper: PaperTable | None, model: str, benchmark: str, prompt: str) -> str:
    """A measured value, with the paper's beside it where the paper ran the same model on the same benchmark."""
    reference = paper_value(paper, model, benchmark, prompt) if paper else None
    return f"{measured:.1f}" + (f" (paper {reference:.1f})" if reference is not None else "")


def _tokens_table(section: Section, tokens: list[TokensByKindRow], missing: str = "",
                  paper: PaperTable | None = None) -> None:
    rows: dict[str, dict[tuple[str, str], str]] = defaultdict(dict)
    for t in tokens:
        if t["prompt_kind"] in PROMPTS:
            rows[t["model"]][(t["benchmark"], t["prompt_kind"])] = _with_paper(
                t["mean_output_tokens"], paper, t["model"], t["benchmark"], t["prompt_kind"])
    if not rows:
        section.notes.append("No generations of these models in this report" + (f": {missing}." if missing else "."))
        return
    section.tables.append(_grid(rows, sorted({t["benchmark"] for t in tokens}), "model"))


def _scores_table(store: Store, section: Section, singles: list[RunRow], missing: str = "",
                  paper: PaperTable | None = None) -> None:
    rows: dict[str, dict[tuple[str, str], str]] = defaultdict(dict)
    for run in singles:  # oldest first: the latest run of a setting wins
        prompt, model = run["single_prompt"] or "", run_models(run)
        value = 100 * store.headline[run["run_id"]][1]
        rows[model][(run["benchmark"], prompt + (" +S2" if run["s2"] else ""))] = _with_paper(
            value, None if run["s2"] else paper, model, run["benchmark"], prompt)
    if not rows:
        section.notes.append("No single-model run of these models in this report: " + (
            missing or "<code>mai run --mode single --single-model large --single-prompt S</code> (and E, R)") + ".")
        return
    section.tables.append(_grid(rows, sorted({r["benchmark"] for r in singles}), "model"))


def _transfer_table(store: Store, section: Section) -> None:
    """Per benchmark: small R, large S, large R and large + small R (Full RT), with Full RT's relative change
    against large S, as the paper's table 8."""
    latest: dict[tuple[str, str], RunRow] = {}
    for run in store.runs:
        if run["run_id"] in store.headline and run["transfer"] == "full" and not run["s2"]:
            latest[(run["benchmark"], run_label(run))] = run
    benchmarks = sorted({b for b, label in latest if label == FULL_RT})
    if not benchmarks:
        section.notes.append("No Full RT run in this report: <code>mai run --mode full_rt</code> stores one.")
        return
    settings = ["small R", "large S", "large R", FULL_RT]
    table = Table(["setting", *benchmarks], [])
    for setting in settings:
        cells: list[Cell] = [setting]
        for benchmark in benchmarks:
            found = latest.get((benchmark, setting))
            if found is None:
                cells.append(None)
                continue
            run = found
            value = 100 * store.headline[run["run_id"]][1]
            base = latest.get((benchmark, "large S"))
            change = ""
            if setting == FULL_RT and base is not None and store.headline[base["run_id"]][1]:
                change = f" ({100 * (store.headline[run['run_id']][1] / store.headline[base['run_id']][1] - 1):+.1f} %)"
            cells.append(f"{value:.1f}{change}")
        table.rows.append(cells)
    section.tables.append(table)


def runs_record(store: Store) -> Section:
    section = Section("runs", "Runs: provenance and unparsed answers",
                      "What each run was made with, as stored with it, and the share of each stage's answers no "
                      "parser could read (the paper adds S2 because the small model's answer after its own "
                      "reasoning is often unparsable).")
    table = Table(["run", "setting", "token budgets", "dtype, backend", "scorer profile", "models @ revision",
                   "code"], [], "Provenance", wrap=("token budgets", "models @ revision", "code"))
    for run in store.runs:
        p = Provenance.of(run)
        table.rows.append([run["run_id"], run_label(run), p.budgets, f"{p.dtype}, {p.backend}", p.scorer_profile,
                           p.revisions, f"{p.code}; {p.packages}"])
    section.tables.append(table)
    parsed = fetch(store.home, StageParseRow, STAGE_PARSE, [store.run_ids])
    labels = {r["run_id"]: run_label(r) for r in store.runs}
    section.tables.append(Table(
        ["run", "setting", "stage", "answers", "unparsed", "unparsed %"],
        [[r["run_id"], labels.get(r["run_id"]), r["stage"], r["outputs"], r["unparsed"],
          f"{100 * r['unparsed'] / r['outputs']:.1f}" if r["outputs"] else None] for r in parsed],
        "Unparsed answers per run and stage"))
    return section
