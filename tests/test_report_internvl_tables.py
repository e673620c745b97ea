"""Tables 13 and 14 of the report from a store holding runs of both families: the InternVL runs fill the InternVL
tables (tokens per prompt, single-model scores), the Qwen runs stay in tables 5 and 7, and the paper's InternVL
numbers stand beside them."""

from __future__ import annotations

import html
import re
from pathlib import Path

from mai import api
from mai.config import RunConfig

BUDGETS = {"S": 4, "E": 8, "R": 8, "S2": 4, "RT": 4}


def section(page: str, key: str) -> str:
    """The HTML of the report's subsection `key` (up to the next subsection)."""
    start = page.index(f'id="{key}"')
    following = re.search(r'id="(table|figure)-\d+"', page[start + 10:])
    return page[start:start + 10 + following.start()] if following else page[start:]


def test_internvl_runs_fill_tables_13_and_14_beside_the_papers(tmp_path: Path) -> None:
    runs = []
    for model, prompt in [("mai-tiny-internvl-large", "S"), ("mai-tiny-internvl-large", "R"),
                          ("mai-tiny-large", "S")]:
        config = RunConfig(home=str(tmp_path), limit=4, shards=1, mode="single", single_model="large",
                           single_prompt=prompt, large_model=model, max_new_tokens=BUDGETS)
        runs.append(api.run(config, progress=False, local=True)["run_id"])
    out = tmp_path / "report.html"
    api.report(runs, out=out, home=tmp_path)
    page = html.unescape(out.read_text())
    table_13, table_14 = section(page, "table-13"), section(page, "table-14")
    for part in (table_13, table_14):
        assert "mai-tiny-internvl-large" in part and "mai-tiny-large" not in part
        assert "InternVL3.5-14B" in part and "The paper's" in part  # the paper's numbers beside the measured
    assert "demo test, 4 samples" in table_13 and "<th>S</th><th>E</th><th>R</th>" in table_13  # one table per group
    table_5 = section(page, "table-5")
    assert "mai-tiny-large" in table_5 and "mai-tiny-internvl-large" not in table_5
