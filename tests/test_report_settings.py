"""The report names what it shows (issue 59): settings that differ only in their configuration are labelled by what
differs (`MAI (prompt 2, R=16)`), in the CSV export too; a run whose outputs are not all in the store is never shown
as whole (its token and time cells are dashes whose footnote says how many outputs are missing, and `mai report`
prints one `note:` line); a timing set whose two sides ran beyond one load band gives no measured speed-up. One
store: a benchmark spec (the colours TSV) with three cascades (prompt template 1, template 2, template 2 with a
smaller R budget) and a Full RT run."""

from __future__ import annotations

import base64
import csv
import shutil
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, cast

import duckdb
import pytest

from mai import api
from mai.cli import main
from mai.dashboards.rows import SpeedupRow, TimingSetRow
from mai.dashboards.time_tables import Timings, measured
from mai.storage.catalog import query
from mai.storage.paths import Home
from tests.helpers import BUDGET
from tests.test_benchmark_specs import TEMPLATE, run_spec, write_spec, write_tsv

SMALLER_R = 16


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, assets_home: Path) -> tuple[Path, dict[str, str]]:
    root, data = tmp_path_factory.mktemp("settings"), tmp_path_factory.mktemp("colours")
    shutil.copytree(assets_home / "models", root / "models")
    write_tsv(data / "colours.tsv")

    def spec(template: str) -> str:
        return str(write_spec(data, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                              prompt=template))

    first = spec(TEMPLATE)
    runs = {"v1": run_spec(root, first)["run_id"], "full_rt": run_spec(root, first, mode="full_rt")["run_id"]}
    second = spec(TEMPLATE.replace("Colour quiz.", "Colour test."))
    runs["v2"] = run_spec(root, second)["run_id"]
    runs["v2_r"] = run_spec(root, second, max_new_tokens={**BUDGET, "R": SMALLER_R})["run_id"]
    return root, runs


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as lines:
        return list(csv.DictReader(lines))


def test_two_template_variants_get_distinct_labels_in_the_csv_export(store: tuple[Path, dict[str, str]],
                                                                     tmp_path: Path) -> None:
    root, _ = store
    api.report(None, out=tmp_path / "r.html", home=root, tables=tmp_path / "tabs")
    index = read_csv(tmp_path / "tabs" / "index.csv")
    (funnel,) = [t["table"] for t in index if t["table"].startswith("routing-funnel-") and "stage" in t["caption"]]
    settings = [row["setting"] for row in read_csv(tmp_path / "tabs" / f"{funnel}.csv")]
    assert len(settings) == 3 and len(set(settings)) == 3  # three cascades, three names
    assert settings[0].startswith("MAI (prompt 1,") and settings[1].startswith("MAI (prompt 2,")
    assert settings[2] == f"MAI (prompt 2, R={SMALLER_R})"
    assert (tmp_path / "tabs" / f"{funnel}.tex").read_text().count(f"MAI (prompt 2, R={SMALLER_R})") == 1


def test_a_deleted_generations_file_gives_cells_that_say_outputs_are_missing(
        store: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, runs = store
    damaged = tmp_path / "store"
    shutil.copytree(root, damaged, symlinks=True)
    stored = sorted(str(p) for p in (damaged / "store" / "generations").glob("*/*/*.parquet"))  # partitions: links
    files = duckdb.sql(f"SELECT DISTINCT filename FROM read_parquet({stored}, filename = true, union_by_name = true) "
                       f"WHERE run_id = '{runs['v2_r']}' AND prompt_kind = 'R' ORDER BY filename").fetchall()
    Path(files[0][0]).unlink()  # one file of reasoning outputs the last cascade computed
    _, counts = query(Home.at(damaged), "SELECT count(*) FROM routes r ANTI JOIN generations g "
                                        f"ON g.gen_id = r.gen_r_small WHERE r.run_id = '{runs['v2_r']}' "
                                        "AND r.gen_r_small IS NOT NULL")
    assert counts[0][0] > 0  # some of the run's reasoning outputs are gone

    assert main(["--home", str(damaged), "report", "--out", str(tmp_path / "r.html"),
                 "--tables", str(tmp_path / "tabs")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and runs["v2_r"] in notes[0] and " outputs missing" in notes[0]
    index = read_csv(tmp_path / "tabs" / "index.csv")
    (per_run,) = [t for t in index if t["table"].startswith("table-11-") and "every run's time" in t["caption"]]
    rows = {row["run"]: row for row in read_csv(tmp_path / "tabs" / f"{per_run['table']}.csv")}
    lost = rows[runs["v2_r"]]
    assert lost["output tokens"].startswith("\u2014") and lost["measured s"].startswith("\u2014")
    (note,) = [n for n in per_run["footnotes"].split(" | ") if runs["v2_r"] in n and "outputs missing" in n]
    assert note.startswith(f"run {runs['v2_r']}: ") and " of " in note
    assert rows[runs["v1"]]["output tokens"].isdigit()  # an intact run keeps its numbers
    page = (tmp_path / "r.html").read_text()
    assert "outputs missing" in page and f"{runs['v2_r']}: " in page


# --- a timing set's two sides in one load band (no store: the rows as the saved queries give them) -------------


def timed(run_id: str, seconds: float, low: float, high: float) -> TimingSetRow:
    return {"timing_set": "both", "run_id": run_id, "measured_s": seconds, "outputs": 4, "identical": 4,
            "realised_batches": "r_small 4", "batch_limits": "S=8 R=8", "regime": "box (cpu); cpu; transformers",
            "load_min": low, "load_max": high, "load_band": max(low, 2.0), "cpu_count": 2,
            "created_at": datetime(2026, 11, 29, tzinfo=UTC)}


def speedup_row(run_id: str, reference: str) -> SpeedupRow:
    return cast(SpeedupRow, {
        "run_id": run_id, "setting": "MAI", "estimate_name": "h100-2b+h100-8b", "estimated_s": 2.0,
        "measured_s": 10.0, "full_rt_run_id": reference, "measured_speedup_vs_full_rt": None,
        "full_rt_mixed": "times reused from other runs", "estimated_speedup_vs_full_rt": 1.5,
        "realised_batches": "r_small 4", "batch_limits": "S=8 R=8", "load_start": 2.8, "load_end": 3.7,
        "load_min": 2.76, "load_max": 3.68, "load_band": 2.76})


@pytest.mark.parametrize(("other", "shown"), [((3.68, 5.96), False), ((2.9, 3.5), True)])
def test_a_timing_set_with_loads_beyond_one_band_prints_no_speedup(other: tuple[float, float], shown: bool) -> None:
    sets = {"both": {"r-mai": timed("r-mai", 10.0, 2.76, 3.68), "r-full": timed("r-full", 26.0, *other)}}
    cell = measured(speedup_row("r-mai", "r-full"), "full_rt", Timings({}, {}, {}, sets))
    if shown:
        assert cell.speedup == "2.60x" and not cell.footnote
        return
    assert cell.speedup == "1.50x" and cell.run_s == 2.0  # the estimate stands there, marked by its footnote
    assert cell.footnote.startswith("estimate (equation 27, h100-2b+h100-8b), not measured")
    assert "loads 2.76-5.96, beyond one load band (2.76-5.52)" in cell.footnote
    assert "`mai time r-mai r-full`" in cell.footnote and "2.60" not in cell.speedup + cell.footnote
    assert "WARNING, beyond one load band" in cell.load


def test_labels_name_what_differs_in_the_configuration() -> None:
    from mai.dashboards.labels import setting_labels

    def config(**overrides: Any) -> str:
        import json

        base: dict[str, Any] = {"mode": "cascade", "s2": False, "max_new_tokens": {"S": 8, "R": 24},
                                "benchmark_spec": {"prompt": "A {question}", "data": "x.tsv"}, "home": "/a",
                                "shards": 2}
        return json.dumps({**base, **overrides})

    def run(run_id: str, **overrides: Any) -> Any:
        return {"run_id": run_id, "mode": "cascade", "s2": False, "transfer": "full", "small_model": "s",
                "large_model": "l", "config_json": config(**overrides)}

    runs = [run("a"), run("b", home="/b", shards=1, benchmark_spec={"prompt": "A {question}", "data": "y.tsv"}),
            run("c", benchmark_spec={"prompt": "B {question}"}), run("d", max_new_tokens={"S": 8, "R": 40})]
    labels = setting_labels(runs, {r["run_id"]: "group" for r in runs})
    assert labels == {"a": "MAI (prompt 1, R=24)", "b": "MAI (prompt 1, R=24)", "c": "MAI (prompt 2, R=24)",
                      "d": "MAI (prompt 1, R=40)"}  # where the store is and how it was sharded make no setting
    assert setting_labels(runs[:2], {"a": "g", "b": "g"}) == {"a": "MAI", "b": "MAI"}


# --- numbers round as SQL rounds them (issue 61) ------------------------------------------------------------------


def write_quiz(path: Path, answers: list[str]) -> Path:
    """The colours quiz in VLMEvalKit's TSV, a row per answer (images repeat every four rows)."""
    from tests.test_benchmark_specs import COLOURS, NAMES, png

    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter="\t")
        writer.writerow(["index", "image", "question", "hint", "A", "B", "C", "D", "answer", "category"])
        for i, answer in enumerate(answers):
            image = base64.b64encode(png(COLOURS[NAMES[i % 4]])).decode()
            writer.writerow([str(i), image, "What colour is the square?", "", *NAMES, answer, "all"])
    return path


def test_a_score_at_a_rounding_edge_reads_the_same_in_html_csv_latex_and_mai_sql(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiz = write_quiz(tmp_path / "quiz.tsv", ["A"] * 16)
    spec = str(write_spec(tmp_path, name="quiz", data="quiz.tsv", format="vlmevalkit-tsv", answer_kind="choice"))
    single = {"mode": "single", "single_model": "small", "single_prompt": "S"}
    first = run_spec(home, spec, **single)["run_id"]
    _, answered = query(Home.at(home), f"SELECT sample_id, final_answer FROM routes WHERE run_id = '{first}' "
                                       "ORDER BY CAST(split_part(sample_id, '-', 2) AS INT)")
    letters = [str(a) if a in ("A", "B", "C", "D") else None for _, a in answered]
    parsed = [i for i, a in enumerate(letters) if a]
    right = set(parsed[:13 if len(parsed) >= 13 else len(parsed) - (1 - len(parsed) % 2)])
    assert len(right) % 2 == 1  # an odd count of 16: 100 * k / 16 ends in .25 or .75, a tie at one decimal
    write_quiz(quiz, [a if i in right and a else ("B" if a == "A" else "A") for i, a in enumerate(letters)])
    run_id = run_spec(home, spec, **single)["run_id"]
    percent = 100 * len(right) / 16
    expected, half_even = f"{Decimal(percent).quantize(Decimal('0.1'), ROUND_HALF_UP)}", f"{percent:.1f}"
    assert expected != half_even  # 81.25: SQL gives 81.3, Python's format 81.2

    assert main(["--home", str(home), "sql", (f"SELECT round(100 * avg(score), 1) AS percent FROM scores "
                                               f"WHERE run_id = '{run_id}'"), "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["percent", expected]
    api.report([run_id], out=tmp_path / "r.html", home=home, tables=tmp_path / "tabs")
    cell = f"{expected} ["  # the score cell: '81.3 [interval] n=16'
    assert cell in (tmp_path / "r.html").read_text() and f"{half_even} [" not in (tmp_path / "r.html").read_text()
    (scores,) = [t["table"] for t in index_of(tmp_path / "tabs") if t["table"].startswith("table-7-")]
    assert next(row["S"] for row in read_csv(tmp_path / "tabs" / f"{scores}.csv")).startswith(cell)
    assert cell in (tmp_path / "tabs" / f"{scores}.tex").read_text()


def index_of(tables: Path) -> list[dict[str, str]]:
    return read_csv(tables / "index.csv")
