"""The report compares like with like: each table is one comparison group (benchmark and sample set) and no cell
reads a run of another group. One store: two model pairs (the tiny Qwen pair A and the tiny InternVL pair B), A's
cascade with and without S2, A's baselines, a small-S baseline at two sample counts (the later one over fewer
samples), A's small R with S2, Full RT of both pairs, a cascade of B and a one-layer sparse sweep of A. A sample
set is the data and the sample ids. And local InternVL checkpoints land in tables 13 and 14 by the family their runs
recorded, whatever directory the report is built from: one named like an official InternVL3.5 checkpoint beside the
paper's value, one whose name does not say InternVL."""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import subprocess
from collections import Counter
from hashlib import md5
from pathlib import Path
from typing import Any

import pytest

from mai import api
from mai.config import INTERNVL_LARGE_BUILTIN, INTERNVL_SMALL_BUILTIN, RunConfig
from mai.storage.paths import Home
from tests.hub_fixtures import write_fixture

BUDGETS = {"S": 4, "E": 8, "R": 8, "S2": 4, "RT": 4}
N, FEWER = 6, 4
NAMED = "fewer-cascade"  # the name the 4-sample cascade is given (--name)
PAIR_B = {"small_model": INTERNVL_SMALL_BUILTIN, "large_model": INTERNVL_LARGE_BUILTIN}


def section(page: str, key: str) -> str:
    """The HTML of the report's subsection `key` (up to the next subsection or section)."""
    start = page.index(f'id="{key}"')
    following = re.search(r'id="(table|figure)-\d+"|<section id="', page[start + 10:])
    return page[start:start + 10 + following.start()] if following else page[start:]


def tables(part: str) -> list[dict[str, Any]]:
    """Each group table of `part`: its group, the runs its cells read, its header and its cells (text)."""
    found = []
    for match in re.finditer(r'<table data-group="([^"]*)" data-runs="([^"]*)">(.*?)</table>', part, re.DOTALL):
        body = match.group(3)
        head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", body)]
        rows = [[(cls, html.unescape(re.sub(r"<[^>]+>", "", text)))  # a cell's tooltip span aside
                 for cls, text in re.findall(r'<td(?: class="(\w+)")?>(.*?)</td>', row)]
                for row in re.findall(r"<tr class=\"[^\"]*\">(.*?)</tr>", body)]
        found.append({"group": match.group(1), "runs": match.group(2).split(), "head": head, "rows": rows})
    return found


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> tuple[Path, dict[str, str]]:
    """The runs in this process (the in-process executor): the report reads the store, whichever executor wrote it."""
    from mai.config import sweep_variants

    root = tmp_path_factory.mktemp("groups")
    shutil.copytree(assets_home / "models", root / "models")

    def run(limit: int = N, **overrides: Any) -> str:
        config = RunConfig(home=str(root), limit=limit, shards=1, max_new_tokens=BUDGETS, **overrides)
        return str(api.run(config, progress=False, local=True)["run_id"])

    single = {"mode": "single"}
    runs = {"cascade": run(), "cascade_s2": run(s2=True),
            "large_s": run(**single, single_model="large", single_prompt="S"),
            "large_r": run(**single, single_model="large", single_prompt="R"),
            "small_r": run(**single, single_model="small", single_prompt="R"),
            "small_r_s2": run(**single, single_model="small", single_prompt="R", s2=True),
            "small_s": run(**single, single_model="small", single_prompt="S"),
            "full_rt": run(mode="full_rt"), "full_rt_b": run(mode="full_rt", **PAIR_B),
            "cascade_b": run(**PAIR_B),
            "small_s_fewer": run(FEWER, **single, single_model="small", single_prompt="S"),
            "cascade_fewer": run(FEWER, run_name=NAMED)}
    # `mai sweep --layers 1`: its one run (the `mai-sweep` flow runs its variants in turn)
    (variant,) = sweep_variants(RunConfig(home=str(root), limit=N, shards=1, max_new_tokens=BUDGETS), [1])
    sparse = api.run(variant, progress=False, local=True)
    runs["sparse_l1"] = str(sparse["run_id"])
    return root, runs


def stored_sample_sets(root: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Per run: its sample set, (its data fingerprint, the ids of the samples it answered), read from the store."""
    _, rows = api.query(root, "SELECT r.run_id, any_value(ru.dataset_fingerprint), list_sort(list(r.sample_id)) "
                              "FROM routes r JOIN runs ru USING (run_id) GROUP BY r.run_id")
    return {str(row[0]): (str(row[1]), tuple(str(s) for s in row[2])) for row in rows}


def unmeasured(text: str) -> bool:
    """A cell that names why a score is missing instead of one (a dash with its footnote's mark: `¹` to `⁹`, then
    `[10]` and on: how many notes a report has depends on the runs' timings, which follow the machine's load)."""
    bare = re.sub(r"(?:[¹²³⁴⁵⁶⁷⁸⁹]|\[\d+\])+$", "", text)
    return bare in ("-", "\u2014") or text.startswith(("not stored", "not on these"))


@pytest.mark.slow
def test_no_table_mixes_groups_and_every_score_cell_states_n(store: tuple[Path, dict[str, str]],
                                                             tmp_path: Path) -> None:
    root, runs = store
    out = tmp_path / "report.html"
    api.report(None, out=out, home=root)
    page = out.read_text()
    sets = stored_sample_sets(root)
    counts = {run_id: (data, len(ids)) for run_id, (data, ids) in sets.items()}
    grouped = [t for key in ("table-5", "table-6", "table-7", "table-8", "table-9", "routing-funnel", "table-11",
                             "table-12", "table-15") for t in tables(section(page, key))]
    assert grouped
    for table in grouped:  # one sample set per table: the same data and the same sample ids
        assert {sets[r] for r in table["runs"]} == {sets[table["runs"][0]]}, table
    # every score cell of the report (tables 5-15, the policy lab) states n, and tables 9 and 15 mark theirs
    scores = [html.unescape(text) for text in re.findall(r'<td class="score">(.*?)</td>', page)]
    assert [text for text in scores if not unmeasured(text) and not re.search(r"\bn=\d+\b", text)] == []
    for key, column in (("table-9", "L1"), ("table-15", "score with %"), ("policy-lab", "score %")):
        part = section(page, key) if key != "policy-lab" else page[page.index('id="policy-lab"'):]
        head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", part.split("</thead>")[0])]
        first = re.search(r"<tbody><tr[^>]*>(.*?)</tr>", part)
        assert first is not None, key
        cells = re.findall(r"<td(?: class=\"(\w+)\")?>(.*?)</td>", first.group(1))
        assert cells[head.index(column)][0] == "score", (key, cells)
        assert re.search(rf"\[\d+\.\d, \d+\.\d\] n=({N}|{FEWER})\b", html.unescape(cells[head.index(column)][1])), cells
    # table 7: both sample counts are their own groups, and the S2 run has its own column
    table_7 = tables(section(page, "table-7"))
    by_n = {counts[t["runs"][0]][1]: t for t in table_7}
    assert set(by_n) == {N, FEWER}
    assert runs["small_s_fewer"] in by_n[FEWER]["runs"] and runs["small_s_fewer"] not in by_n[N]["runs"]
    assert runs["small_s"] in by_n[N]["runs"] and runs["small_r_s2"] in by_n[N]["runs"]
    assert "R +S2" in by_n[N]["head"]
    small_row = next(r for r in by_n[N]["rows"] if r[0][1] == "mai-tiny-small")
    assert re.search(r"\[\d+\.\d, \d+\.\d\] n=6", small_row[by_n[N]["head"].index("R +S2")][1])
    # table 10: the cascade's small-S baseline is the run over its own samples, not the later 4-sample run, and it
    # carries MAI's paired test
    (funnel,) = [t for t in tables(section(page, "routing-funnel")) if runs["cascade"] in t["runs"]
                 and "baseline" in t["head"]]
    assert runs["small_s"] in funnel["runs"] and runs["small_s_fewer"] not in funnel["runs"]
    assert any("p=" in text and "McNemar" in text for row in funnel["rows"] for _, text in row)
    # table 8: a row per setting of each pair, named by model; Full RT against large S with the paired test
    (table_8,) = tables(section(page, "table-8"))
    models = {row[1][1] for row in table_8["rows"]}
    assert {"mai-tiny-small", "mai-tiny-large", "mai-tiny-large + mai-tiny-small R",
            f"{INTERNVL_LARGE_BUILTIN} + {INTERNVL_SMALL_BUILTIN} R"} <= models
    # table 9: the sweep's baselines are its own pair's full-transfer runs without S2
    (table_9,) = tables(section(page, "table-9"))
    assert runs["sparse_l1"] in table_9["runs"]
    assert runs["cascade"] in table_9["runs"]  # a cascade-mode sweep's "Full": the cascade with full transfer
    for other in ("full_rt_b", "cascade_b", "cascade_s2"):
        assert runs[other] not in table_9["runs"], other
    assert table_9["head"][-1] == "Full" and table_9["head"][2] == "large S" and runs["large_s"] in table_9["runs"]
    # table 16: the paper's 15 ranks, and its N-tok (80 %) is what sparse RT selected for that sample
    part = section(page, "table-16")
    assert "<th>15th</th>" in part and [t["group"] for t in tables(part)] == [table_9["group"]]  # the sweep's group
    sample, kept = re.search(r"<td>L1</td><td class=\"text\">[^<]*</td><td>([^<]+)</td><td>[\d.]+ % \((\d+)\)",
                             part).groups()
    _, selected = api.query(root, "SELECT s.transferred_tokens FROM selections s WHERE s.layer = 1 AND "
                                  f"s.sample_id = '{sample}'")
    assert {int(kept)} == {int(row[0]) for row in selected}
    # figures 4 and 5: one column per captured layer, named by its index
    figures = re.search(r'id="chart-data">(.*?)</script>', page, re.DOTALL)
    assert figures is not None
    heatmaps = [trace for chart in json.loads(figures.group(1)).values() for trace in chart["data"]
                if trace["type"] == "heatmap"]
    assert heatmaps and all(trace["x"] == ["L1"] for trace in heatmaps)


def charts(page: str, key: str) -> list[dict[str, Any]]:
    """The plotly figures of the report's (sub)section `key`, in order."""
    found = re.search(r'id="chart-data">(.*?)</script>', page, re.DOTALL)
    assert found is not None
    figures = json.loads(found.group(1))
    return [figures[k] for k in sorted(figures, key=lambda k: int(k.rsplit("-", 1)[1]))
            if k.rsplit("-chart-", 1)[0] == key]


@pytest.mark.slow
def test_no_chart_mixes_groups_and_time_is_estimated_or_measured(store: tuple[Path, dict[str, str]],
                                                                 tmp_path: Path) -> None:
    """The routing funnel's and table 11's charts are drawn per comparison group (a chart names runs of one sample
    set only), and so are figures 3-5 and the S2 chart; table 11's estimated and measured seconds are separate
    panels with their own axes; table 9's and figure 3's lines are drawn in their legend entry's colour."""
    root, runs = store
    out = tmp_path / "report.html"
    api.report(None, out=out, home=root)
    page = out.read_text()
    by_short = {run_id[-6:]: sample_set for run_id, sample_set in stored_sample_sets(root).items()}

    def sample_sets(figure: dict[str, Any]) -> set[tuple[str, tuple[str, ...]]]:
        labels = [str(label) for trace in figure["data"] for label in (trace.get("x") or []) + (trace.get("y") or [])
                  if isinstance(label, str)]
        return {by_short[m] for label in labels for m in re.findall(r"\(([0-9a-f]{6})\)", label)}

    funnel = charts(page, "routing-funnel")
    assert len(funnel) == 4  # two groups of cascades (6 and 4 samples), each a funnel and a score chart
    assert [len(sample_sets(f)) for f in funnel] == [1] * 4
    assert {len(ids) for f in funnel for _, ids in sample_sets(f)} == {N, FEWER}
    timed = charts(page, "table-11")
    assert len(timed) == 2 and [len(sample_sets(f)) for f in timed] == [1, 1]
    for figure in timed:  # no estimate stored here: the measured panel alone, no empty "profiles of none" panel
        assert [t["name"] for t in figure["data"]] == ["measured (wall time)"]
        assert [a["text"].split(" (")[0] for a in figure["layout"]["annotations"]] == ["measured s"]
    _time_tables_name_where_each_time_was_measured(page, runs)
    for key in ("table-9", "figure-3"):
        for figure in charts(page, key):
            colours: dict[str, set[str]] = {}
            for trace in figure["data"]:
                if trace.get("legendgroup"):
                    colours.setdefault(trace["legendgroup"], set()).add(trace["line"]["color"])
                    if "marker" in trace and "color" in trace["marker"]:
                        colours[trace["legendgroup"]].add(trace["marker"]["color"])
            assert colours and all(len(c) == 1 for c in colours.values()), (key, colours)
    for key in ("figure-3", "figure-4", "figure-5", "s2"):  # one chart per group, titled with it
        assert [f["layout"]["title"]["text"].startswith(f"demo test, {N} samples") for f in charts(page, key)] == [True]
    # the group filter offers every group; each chart of a group names it, as each table does
    offered = set(re.findall(r'<option value="([^"]+)"', page.split('id="group-filter"')[1].split("</select>")[0]))
    assert {t["group"] for key in ("table-7", "routing-funnel") for t in tables(section(page, key))} == offered
    grouped_charts = re.findall(r'<div class="chart" id="(?:figure-[1345]|routing-funnel|s2|table-9|table-11)-chart-\d+"'
                                r'(?: data-group="([^"]+)")?>', page)
    assert len(grouped_charts) > 10 and set(grouped_charts) <= offered, grouped_charts


NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def compiled(table_tex: Path) -> tuple[str, str]:
    """An exported table \\input into a two-column article with the packages the export names, compiled by pdflatex:
    the PDF's text (pdftotext, in layout order) and the compiler's log. Fails on any LaTeX error."""
    from mai.dashboards.export import PACKAGES

    assert shutil.which("pdflatex") and shutil.which("pdftotext"), "TeX Live and poppler-utils: `make setup`"
    work = table_tex.parent.with_name(f"{table_tex.parent.name}-compiled")  # beside the export, not in it
    work.mkdir(exist_ok=True)
    shutil.copy(table_tex, work / table_tex.name)
    document = work / f"document-{table_tex.stem}.tex"
    document.write_text(f"\\documentclass[twocolumn]{{article}}\n{PACKAGES}\n\\begin{{document}}\n"
                        f"\\input{{{table_tex.name}}}\n\\end{{document}}\n")
    made = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", document.name],
                          cwd=document.parent, capture_output=True, text=True, timeout=120, check=False)
    log = document.with_suffix(".log").read_text(errors="replace")
    assert made.returncode == 0, log[-3000:]
    text = subprocess.run(["pdftotext", "-layout", str(document.with_suffix(".pdf")), "-"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    return text, log


def in_order(wanted: list[str], found: list[str]) -> bool:
    """Whether `wanted` is a subsequence of `found` (the PDF also holds the caption's and footnotes' numbers)."""
    rest = iter(found)
    return all(any(number == seen for seen in rest) for number in wanted)


def latex_rows(tex: str) -> list[list[str]]:
    """The body cells of a booktabs table, unescaped to the text the page shows (a table in parts: each part's
    columns after the first, which every part repeats, appended to its rows)."""
    by_head: dict[str, list[list[str]]] = {}  # a part's pieces (rows that go on in another float) share its header
    for tabular in tex.split("\\toprule\n")[1:]:
        head, body = tabular.split("\\midrule\n", 1)
        by_head.setdefault(head, []).extend(_part_rows(body.split("\\bottomrule")[0]))
    parts = list(by_head.values())
    return [[*row, *(cell for part in parts[1:] for cell in part[number][1:])] for number, row in enumerate(parts[0])]


def _part_rows(body: str) -> list[list[str]]:
    unescape = {r"\textsuperscript{1}": "¹", r"\textbackslash{}": "\\", r"\textasciitilde{}": "~", r"\%": "%",
                r"\&": "&", r"\_": "_", r"\#": "#", r"\$": "$", r"\{": "{", r"\}": "}"}
    rows = []
    for line in body.strip().splitlines():
        cells = line.removesuffix(" \\\\").split(" & ")
        for escaped, plain in unescape.items():
            cells = [c.replace(escaped, plain) for c in cells]
        rows.append([re.sub(r"\\textsuperscript\{(\d)\}", lambda m: "¹²³⁴⁵⁶⁷⁸⁹"[int(m.group(1)) - 1], c)
                     for c in cells])
    return rows


def empty_panels(figure: dict[str, Any]) -> list[str]:
    """The x axes of a plotly figure that no trace with a value is drawn on."""
    def values(trace: dict[str, Any]) -> list[Any]:
        z = [v for row in trace.get("z") or [] for v in (row if isinstance(row, list) else [row])]
        return [v for v in (trace.get("x") or []) + (trace.get("y") or []) + z if v is not None]

    drawn = {trace.get("xaxis", "x") for trace in figure["data"] if values(trace)}
    axes = [key for key in figure["layout"] if re.fullmatch(r"xaxis\d*", key)] or ["xaxis"]
    return [axis for axis in axes if "x" + axis.removeprefix("xaxis") not in drawn]


@pytest.mark.slow
def test_tables_read_like_the_papers_and_export_to_latex(store: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """Three comparison groups (two sample sets, two model pairs): every group table is captioned in words
    (benchmark, split, sample count and range, model pair, the names given with --name) with the hashes of its exact
    samples as tooltip; no column head names a run; the policy lab is one lab per pair and sample set, and its oracle
    is computed on the samples where every output it chooses among is stored; no chart has an empty panel; `mai
    report --tables` writes table 7 (and every other table) as LaTeX with the page's numbers."""
    root, runs = store
    out, exported = tmp_path / "report.html", tmp_path / "tables"
    api.report(None, out=out, home=root, tables=exported)
    page = out.read_text()
    sets = stored_sample_sets(root)
    captions = [(key, *match.groups()) for key in ("table-5", "table-7", "table-8", "table-9", "routing-funnel")
                for match in re.finditer(r'<table data-group="[^"]*" data-runs="([^"]*)"><caption title="([^"]*)">'
                                         r"(.*?)</caption>", section(page, key))]
    assert {key for key, *_ in captions} == {"table-5", "table-7", "table-8", "table-9", "routing-funnel"}
    for key, read, hashes, caption in captions:
        data, ids = sets[read.split()[0]]
        assert html.unescape(caption).startswith(f"demo test, {len(ids)} samples (first {len(ids)} rows)"), caption
        assert html.unescape(hashes) == f"data {data}, sample ids md5 {md5(','.join(ids).encode()).hexdigest()}"
    funnels = {html.unescape(c) for key, read, _, c in captions if key == "routing-funnel"}
    assert any(f"mai-tiny-small + mai-tiny-large; runs named {NAMED}:" in c for c in funnels), funnels
    assert any(f"{INTERNVL_SMALL_BUILTIN} + {INTERNVL_LARGE_BUILTIN}" in c for c in funnels), funnels
    # no column head names a run (its id is in a tooltip: the setting's, the baseline's)
    heads = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", page)]
    assert heads and [h for h in heads for run_id in runs.values() if run_id[-6:] in h] == []
    assert f'title="run {runs["cascade"]}"' in section(page, "routing-funnel")
    # the policy lab: a lab per model pair and sample set; the oracle on the samples where all its inputs exist
    labs = api.policies(home=root)
    assert sorted((lab["samples"], lab["small_model"]) for lab in labs) == sorted(
        [(FEWER, "mai-tiny-small"), (N, "mai-tiny-small"), (N, INTERNVL_SMALL_BUILTIN)])
    (fewer,) = [lab for lab in labs if lab["samples"] == FEWER]
    _, rows = api.query(root, "SELECT count(*) FROM routes WHERE gen_rt_large IS NOT NULL AND "
                              f"run_id = '{runs['cascade_fewer']}'")  # only RT-routed samples hold every output kind
    (oracle,) = [p for p in fewer["policies"] if p["name"] == "oracle"]
    assert 0 < oracle["n"] == int(rows[0][0]) < FEWER
    lab_tables = re.findall(r"<table[^>]*>.*?</table>", page[page.index('id="policy-lab"'):].split('id="runs"')[0],
                            re.DOTALL)
    assert any(re.search(rf"oracle[¹²³⁴⁵⁶⁷⁸⁹]</td><td class=\"score\">[\d.]+ \[[\d.]+, [\d.]+\] n={oracle['n']}<", t)
               for t in lab_tables), lab_tables
    # no chart has an empty panel
    found = re.search(r'id="chart-data">(.*?)</script>', page, re.DOTALL)
    assert found is not None
    figures = json.loads(found.group(1))
    assert [(key, empty_panels(f)) for key, f in figures.items() if empty_panels(f)] == []
    # table 7 as LaTeX: the same cells, hence the same numbers, as the page; every table is exported
    index = list(csv.DictReader((exported / "index.csv").open()))
    sevens = [row["table"] for row in index if row["table"].startswith("table-7-")]
    page_sevens = tables(section(page, "table-7"))
    assert len(sevens) == len(page_sevens) == 2
    for name, table in zip(sevens, page_sevens):
        tex = (exported / f"{name}.tex").read_text()
        assert "\\toprule" in tex and "\\caption{demo test," in tex
        latex, shown = latex_rows(tex), [[text for _, text in row] for row in table["rows"]]
        assert latex == shown  # the page's cells, footnote marks and intervals included
        assert [[NUMBER.findall(c) for c in row] for row in latex] == [[NUMBER.findall(c) for c in row]
                                                                    for row in shown]
        assert any(re.search(r"\[[\d.]+, [\d.]+\] n=\d+", c) for row in latex for c in row)
        assert list(csv.reader((exported / f"{name}.csv").open()))[1:] == shown
    for key in ("table-12", "routing-funnel", "policy-lab"):  # every table with rows, whatever builds it
        part = page[page.index(f'id="{key}"'):]
        part = part[:next((m.start() for m in re.finditer(r'<(?:section|div) id="', part) if m.start() > 0),
                          len(part))]
        assert len([row for row in index if row["table"].startswith(f"{key}-") and not row["table"].endswith(
            "-narrow")]) == part.count("<tbody><tr"), key
    # tables 10, 11 and 12: a number, or a dash with its footnote, in every cell of a numeric column; no cell
    # says how to measure one
    numeric = {"MV1", "MV2", "RT", "final score %", "baseline score %", "MAI - baseline", "total s (measured)",
               "s / sample", "speed-up", "score w/o S2", "score w/ S2", "accept rate", "vs large R w/o S2 (paired)",
               "output tokens", "estimated s", "est. speed-up vs Full RT", "measured s", "measured speed-up vs Full RT",
               "est. speed-up vs large R", "measured speed-up vs large R"}
    a_number = re.compile(r"[-+]?\d|\u2014(?:[¹²³⁴⁵⁶⁷⁸⁹]|\[\d+\])")
    for row in index:
        if row["table"].startswith(("routing-funnel-", "table-11-", "table-12-")):
            head, *body = list(csv.reader((exported / f"{row['table']}.csv").open()))
            assert not [c for cells in body for c in cells if "mai time" in c], row["table"]
            cells = [(h, c) for cells in body for h, c in zip(head, cells)
                     if h in numeric or (cells[0] in ("Full RT (s)", "MAI (s)", "Speedup") and h != head[0])]
            assert [(h, c) for h, c in cells if not a_number.match(c)] == [], row["table"]
    # every table compiles in a two-column article, fits its line at 7 pt or more (split into parts or set
    # across both columns where it must: the scale read back from the log) and its floats fit a page; tables 7 and
    # 12 print the page's numbers; tables 11 and 12 have a narrow variant (the paper's columns)
    assert {"table-11-1-narrow", "table-12-1-narrow"} <= {row["table"] for row in index}
    for row in index:
        text, log = compiled(exported / f"{row['table']}.tex")
        assert "Overfull \\hbox" not in log and "Float too large" not in log, (row["table"], log[-3000:])
        measured = re.findall(r"mai-table \S+ piece \d+: natural ([\d.]+)pt, line ([\d.]+)pt", log)
        assert measured and all(9 * min(1.0, float(line) / float(natural)) >= 7 for natural, line in measured), \
            (row["table"], measured)
        key, number = row["table"].rsplit("-", 1)
        if key in ("table-7", "table-12") and number.isdigit():
            shown = tables(section(page, key))[int(number) - 1]
            wanted = [n for cells in shown["rows"] for _, cell in cells for n in NUMBER.findall(cell)]
            if key == "table-7":  # one part, short cells: row by row
                assert wanted and in_order(wanted, NUMBER.findall(text)), (row["table"], wanted, text)
            else:  # parts and wrapped cells reorder the text: every number is printed
                assert wanted and not Counter(wanted) - Counter(NUMBER.findall(text)), (row["table"], wanted, text)
    # the command line: `mai report --tables DIR` writes the same files
    from mai.cli import main

    assert main(["--home", str(root), "report", "--out", str(tmp_path / "cli.html"), "--tables",
                 str(tmp_path / "cli")]) == 0
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == sorted(p.name for p in exported.iterdir())
    (tmp_path / "a-file").write_text("kept")
    assert main(["--home", str(root), "report", "--out", str(tmp_path / "none.html"), "--tables",
                 str(tmp_path / "a-file")]) == 2  # a file is no folder: a one-line error, nothing written
    assert (tmp_path / "a-file").read_text() == "kept" and not (tmp_path / "none.html").exists()


def _time_tables_name_where_each_time_was_measured(page: str, runs: dict[str, str]) -> None:
    """Table 11 in the paper's rows (Full RT, MAI, speed-up), a column per MAI run, measured apart from estimated
    (this store has no estimate: no estimated table); MAI +S2's time is made of the cascade's reused outputs, so
    its note names the runs that computed them. Table 12: MAI's paired test against large R, and where both times
    of each speed-up were measured."""
    part = section(page, "table-11")
    (measured,) = [t for t in tables(part) if t["head"][0] == "measured (wall time)"]
    assert not [t for t in tables(part) if t["head"][0].startswith("estimated")]
    assert [row[0][1] for row in measured["rows"]] == ["Full RT (s)", "MAI (s)", "Speedup", "model pair",
                                                       "measured on", "load (1 min)", "MAI run", "Full RT run"]
    column = [cell for _, cell in measured["rows"][6]].index(runs["cascade_s2"])
    assert measured["head"][column] == "MAI +S2"  # the setting heads the column; the run is in its "MAI run" row
    note = measured["rows"][4][column][1]
    assert note.startswith("measured on ") and "times computed by runs" in note and runs["cascade"][-6:] in note
    table_12 = tables(section(page, "table-12"))
    (layout,) = [t for t in table_12 if "vs large R w/o S2 (paired)" in t["head"]]  # one large-R run, one group
    row = next(r for r in layout["rows"] if r[layout["head"].index("run")][1] == runs["cascade"])
    assert re.search(r"p=[\d.e-]+ \(McNemar, n=6\)", row[layout["head"].index("vs large R w/o S2 (paired)")][1])
    with_s2 = next(r for r in layout["rows"] if r[layout["head"].index("run")][1] == runs["cascade_s2"])
    assert with_s2[layout["head"].index("score w/o S2")][1].startswith("\u2014")  # its score stands under 'w/ S2'
    assert "n=6" in with_s2[layout["head"].index("score w/ S2")][1]
    assert len(table_12) > 1  # then every run against large R
    for table in table_12:
        head = table["head"]
        assert "measured on" not in head or all(r[head.index("measured on")][1].startswith((
            "measured on ", "timed by `mai speculative`")) for r in table["rows"]), head


def test_table_9_axis_keeps_an_outlier_baseline_off_the_sweep() -> None:
    from mai.dashboards.transfer_section import sweep_axis

    low, high = sweep_axis([80.0, 83.3], [82.5, 8.3])  # another pair's 8.3 % would squash the sweep to a line
    assert 75 < low < 80 and 83.3 < high < 90
    low, high = sweep_axis([16.7, 33.3], [0.0])  # a baseline near the sweep stays on the axis
    assert low < 0 and 33.3 < high < 40


def test_profiles_of_different_hardware_are_separate_panels() -> None:
    from mai.dashboards.latency_section import profiles_figure
    from mai.dashboards.rows import LatencyPointRow

    def point(name: str, hardware: str, ttft: float, speed: float) -> LatencyPointRow:
        return LatencyPointRow(profile_name=name, model="m", hardware=hardware, input_tokens=128, query_tokens=64,
                               output_tokens=None, image_resolution=256, ttft_ms=ttft, tokens_per_s=speed,
                               preprocess_ms=None, vision_ms=None, decode_ms=None)

    fig = profiles_figure([point("h100-8b", "H100", 30.0, 60.0), point("cpu", "Xeon x2", 3000.0, 2.0)])
    axes = {trace.name: (trace.xaxis, trace.yaxis) for trace in fig.data}
    assert axes["h100-8b (m)"] != axes["cpu (m)"]
    assert axes["H100: tokens / s"] != axes["Xeon x2: tokens / s"]


def test_a_local_internvl35_checkpoint_fills_tables_13_and_14_from_any_directory(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two local InternVL checkpoints: one named like the official InternVL3.5-8B (the paper's value beside it), one
    whose name says nothing of InternVL ('vlm-8b'), so only the family its run recorded can place it in table 14."""
    checkpoints = tmp_path / "checkpoints"
    for name in ("InternVL3_5-8B-HF", "vlm-8b"):
        shutil.copytree(Home.at(home).models / INTERNVL_LARGE_BUILTIN, checkpoints / name)
    data = write_fixture("mmmu", tmp_path / "mmmu")
    monkeypatch.chdir(checkpoints)  # the runs name the checkpoints by paths relative to where they run
    manifests = [api.run(RunConfig(home=str(home), benchmark="mmmu", data=str(data), shards=1, mode="single",
                                   single_model="large", single_prompt="S", large_model=name, max_new_tokens=BUDGETS),
                         progress=False, local=True) for name in ("InternVL3_5-8B-HF", "vlm-8b")]
    assert [m["provenance"]["models"]["large"]["family"] for m in manifests] == ["internvl", "internvl"]
    shutil.rmtree(checkpoints)  # the report reads nothing from the checkpoints
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "report.html"
    api.report([m["run_id"] for m in manifests], out=out, home=home)
    page = html.unescape(out.read_text())
    table_14 = section(page, "table-14")
    assert re.search(r"InternVL3_5-8B-HF</td><td class=\"score\">[\d.]+ \[[\d.]+, [\d.]+\] n=\d+ \(paper 56\.8\)",
                     table_14), table_14[:2000]
    assert re.search(r"vlm-8b</td><td class=\"score\">[\d.]+ \[[\d.]+, [\d.]+\] n=\d+</td>", table_14), table_14[:2000]
    assert re.search(r"InternVL3_5-8B-HF</td><td>[\d.]+ \(paper 10\.6\) n=\d+", section(page, "table-13"))
    assert re.search(r"vlm-8b</td><td>[\d.]+ n=\d+", section(page, "table-13"))
    for name in ("InternVL3_5-8B-HF", "vlm-8b"):
        assert name not in section(page, "table-7") + section(page, "table-5")
    _, rows = api.query(home, "SELECT provenance_json FROM runs")
    assert {json.loads(str(row[0]))["models"]["large"]["architecture"] for row in rows} == \
        {"InternVLForConditionalGeneration"}


def test_score_cells_state_an_interval_and_n() -> None:
    from mai.dashboards.groups import Scored, paired_cell, score_cell
    from mai.paired import mean_interval

    low, high = mean_interval([1.0] * 8 + [0.0] * 2)  # Wilson's interval for 8 of 10, by hand
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert mean_interval([0.5, 0.25, 1.0, 0.0])[0] < 0.4375 < mean_interval([0.5, 0.25, 1.0, 0.0])[1]
    scores = {f"s{i}": 1.0 if i < 8 else 0.0 for i in range(10)}
    assert score_cell(Scored("r", "accuracy", 0.8, scores)) == "80.0 [49.0, 94.3] n=10"
    assert score_cell(Scored("r", "f1", 0.75, scores)) == "75.0 (f1) n=10"  # F1 is no mean over samples
    worse = {**scores, **{f"s{i}": 0.0 for i in range(5)}}  # B loses 5 samples, wins none: p = 2 / 2**5
    assert paired_cell(Scored("a", "accuracy", 0.8, scores), Scored("b", "accuracy", 0.3, worse)) == \
        "-50.0 pts, p=0.062 (McNemar, n=10)"


def test_a_family_the_run_could_not_name_falls_back_to_the_model_name() -> None:
    """A recorded 'unknown' (no config.json read) or 'untested' (an architecture no backend family claims, as a
    non-HF InternVL checkpoint) names no family: the model's name decides; a recorded family wins over the name."""
    from typing import cast

    from mai.dashboards.groups import family, model_families
    from mai.storage.rows import RunRow

    def run(name: str, recorded: str) -> RunRow:
        return cast(RunRow, {"provenance_json": json.dumps({"models": {"large": {"name": name, "family": recorded}}})})

    families = model_families([run("InternVL3_5-8B", "untested"), run("internvl-old", "unknown"),
                               run("ckpt-8b", "internvl"), run("internvl-named-qwen", "qwen-vl")])
    assert families == {"ckpt-8b": "internvl", "internvl-named-qwen": "qwen-vl"}
    assert [family(families, m) for m in ("InternVL3_5-8B", "internvl-old", "ckpt-8b", "internvl-named-qwen")] == \
        ["internvl", "internvl", "internvl", "qwen-vl"]
