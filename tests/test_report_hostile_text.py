"""Report text is data: a question, an answer, an option or a run name holding `<!--`, `<script>`, `</script>` or
`]]>` reaches the page as text, never as markup or script. In a <script> element the HTML tokenizer changes state
only at a `<` (`<!--<script>` enters the "double escaped" state, where `</script>` no longer ends the element, and
the page's later scripts become data), so the embedded JSON holds no `<` at all; elsewhere text is entity-escaped.
A real run over demo rows with hostile questions, its stored answers then given hostile text, real DuckDB."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from mai import api
from mai.cli import main
from mai.evals.demo import generate_demo_rows
from mai.run.assets import DEMO_SEED, demo_data_dir, write_hub_parquet
from mai.storage.paths import Home

HOSTILE = "<!--<script>alert('q')</script>]]><b>x</b>&amp;"
SCRIPTS_IN_A_PAGE = 5  # plotly.js, the chart data, the trace data, the chart drawing, the trace browser


def test_store_strings_reach_the_report_as_text(tmp_path: Path, assets_home: Path) -> None:
    home = Home.at(tmp_path / "home")
    shutil.copytree(assets_home / "models", home.models)
    rows = generate_demo_rows(4, DEMO_SEED)
    for row in rows:
        row["question"] = f"{HOSTILE} {row['question']}"
        if row["A"] is not None:
            row["A"] = f"{row['A']} {HOSTILE}"
    write_hub_parquet(rows, demo_data_dir(home) / "test-00000-of-00001.parquet")
    assert main(["--home", str(home.root), "run", "--local", "--limit", "4", "--name", f"run {HOSTILE}", "--max-new-tokens",
                 "S=4", "--max-new-tokens", "R=6", "--max-new-tokens", "RT=4"]) == 0
    for file in home.store.joinpath("generations").rglob("*.parquet"):  # every stored answer a hostile one
        table = pq.read_table(file)
        texts = [f"{HOSTILE} [[{HOSTILE}]]"] * table.num_rows
        pq.write_table(table.set_column(table.schema.get_field_index("text"), "text", [texts]), file.resolve())

    page = Path(api.report(out=tmp_path / "report.html", home=home.root)["path"]).read_text()
    assert HOSTILE not in page and "<!--" not in page.split("<script>", 1)[1]  # after plotly's own source
    assert len(re.findall(r"<script\b", page, re.IGNORECASE)) == SCRIPTS_IN_A_PAGE
    assert len(re.findall(r"</script\s*>", page, re.IGNORECASE)) == SCRIPTS_IN_A_PAGE
    data = re.findall(r'<script type="application/json" id="[a-z-]+">(.*?)</script>', page, re.DOTALL)
    assert len(data) == 2 and not any(char in text for text in data for char in "<>&")
    assert "\\u003c!--\\u003cscript\\u003ealert('q')\\u003c/script\\u003e]]\\u003e" in data[1]  # the trace data
    # the run's name is in the store (the page shows it nowhere today; where it will, the first check holds it)
    assert api.query(home.root, "SELECT run_name FROM runs")[1] == [(f"run {HOSTILE}",)]
