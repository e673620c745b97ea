"""The report's definitions match the paper's (issue 53), on the shared report store (the trained shapes pair, whose
reasoning ends with an end-of-sequence token): table 9's "Full" is the number of reasoning tokens full transfer
hands the large model, the small model's stored output tokens without the end-of-sequence token, as a sparse
selection counts its tokens; tables 5 and 8 say which population and which kind of change they show."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from mai import api
from tests.report_store import Store, report_store
from tests.test_report_groups import section, tables

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, prefect_server: str, assets_home: Path,
          shapes_dataset: Path) -> Store:
    return report_store(tmp_path_factory, assets_home, shapes_dataset)


def test_table_9_full_counts_the_stored_reasoning_tokens(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    api.report(None, out=out, home=store.home)
    page = out.read_text()
    (table,) = tables(section(page, "table-9"))
    full = {row[0][1]: row[table["head"].index("Full")][1] for row in table["rows"]
            if row[1][1] == "mean tokens transferred"}
    # each line's Full: the same mode's full-transfer run, its small R outputs on the samples RT decided
    for line, run in (("MAI sparse RT, delta 0.8", "cascade"), ("Full RT sparse, delta 0.8", "full_rt")):
        _, rows = api.query(store.home, "SELECT avg(len(g.output_token_ids)), avg(g.output_tokens) FROM routes r "
                                        "JOIN generations g ON g.gen_id = r.gen_r_small "
                                        f"WHERE r.run_id = '{store.runs[run]}' AND r.route = 'RT'")
        stored, counted = float(rows[0][0]), float(rows[0][1])
        assert stored < counted  # the reasoning stopped at its end-of-sequence token, which output_tokens counts
        assert full[line] == f"{stored:.1f}", (line, full, stored, counted)
    caption = html.unescape(section(page, "table-9"))
    assert "without the end-of-sequence token" in caption


def test_tables_5_and_8_state_their_population_and_their_change(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    api.report(None, out=out, home=store.home)
    page = html.unescape(out.read_text())
    (table_8,) = tables(section(page, "table-8"))
    assert table_8["head"][3:] == ["relative change vs large S", "difference vs large S"]
    full_rt = next(row for row in table_8["rows"] if row[0][1] == "Full RT")
    assert full_rt[3][1].endswith("% (relative)") and " pts, p=" in full_rt[4][1]
    # over the cascade alone, the small model reasons only on the samples MV1 did not settle
    api.report([store.runs["cascade"]], out=out, home=store.home)
    page = html.unescape(out.read_text())
    (table_5,) = tables(section(page, "table-5"))
    reasoned = [text for row in table_5["rows"] for _, text in row if text.endswith("¹")]
    _, rows = api.query(store.home, "SELECT count(*) FROM routes WHERE gen_r_small IS NOT NULL AND "
                                    f"run_id = '{store.runs['cascade']}'")
    assert reasoned and all(f" n={rows[0][0]}¹" in text for text in reasoned), reasoned
    assert "the paper's table averages each prompt over every sample" in section(page, "table-5")
