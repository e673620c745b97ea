"""`mai report --tables DIR`: every table of the report, as CSV and as LaTeX (booktabs), ready for a paper.

Generic over the report's sections: whatever tables a section builds are written, so a table added later exports
with no change here. Per table `<section>-<k>.csv` (a header row, then one row per table row, the cells as the
page shows them: a score cell keeps its interval and n, "83.1 [76.5, 88.9] n=160") and `<section>-<k>.tex` (a
`table` float with the caption, a booktabs `tabular` and the footnotes under it), and one `index.csv` naming each
table's file, section, caption, the hashes of its comparison group, its footnotes and the runs its cells read.

CSV through the standard library's `csv` module; LaTeX written here: pandas is no direct dependency of mai (it
comes in through `datasets` only), and a booktabs tabular is a dozen lines with the escaping below."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

from mai.dashboards.charts import Cell, Section, Table

from mai.files import write_atomically

# LaTeX's special characters in text (the backslash is set aside first, so these escapes are not escaped again)
_LATEX = (("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"),
          ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}"))
# footnote marks (mai.dashboards.charts.mark) as LaTeX writes them
_MARKS = {"¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8", "⁹": "9"}
INDEX = "index.csv"


def cell_text(value: Cell) -> str:
    """A cell as the page shows it (a missing cell is '-')."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def latex_escape(text: str) -> str:
    text = text.replace("\\", "\0")
    for plain, escaped in _LATEX:
        text = text.replace(plain, escaped)
    text = text.replace("\0", r"\textbackslash{}")
    for mark, digit in _MARKS.items():
        text = text.replace(mark, rf"\textsuperscript{{{digit}}}")
    return text


def _walk(parts: Sequence[Section]) -> Iterator[tuple[Section, int, Table]]:
    """Every table with a caption or rows, numbered within its (sub)section from 1."""
    for part in parts:
        for number, table in enumerate((t for t in part.tables if t.rows), start=1):
            yield part, number, table
        yield from _walk(part.children)


def table_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows([cell_text(c) for c in row] for row in table.rows)
    return buffer.getvalue()


# what a document that \input's the tables needs in its preamble
PACKAGES = r"\usepackage{booktabs,graphicx}"


def table_latex(table: Table, title: str, label: str) -> str:
    """A booktabs table: caption (the section's heading and the table's caption), header, rows, footnotes. A
    tabular wider than the text (the policy lab's, table 12's) is scaled down to the text width, a narrower one is
    set as it is: LaTeX measures it in a box first (plain LaTeX and graphicx, no package beyond PACKAGES)."""
    row_end = r" \\"
    lines = [f"% {latex_escape(title)}", f"% needs {PACKAGES}", r"\begin{table}[htbp]", r"\centering", r"\small",
             rf"\caption{{{latex_escape(table.caption or title)}}}", rf"\label{{tab:{label}}}",
             r"\sbox0{%", rf"\begin{{tabular}}{{{'l' * len(table.columns)}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in table.columns) + row_end, r"\midrule",
             *(" & ".join(latex_escape(cell_text(c)) for c in row) + row_end for row in table.rows),
             r"\bottomrule", r"\end{tabular}}",
             r"\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi"]
    lines += [rf"\par\footnotesize {number}. {latex_escape(note)}" for number, note in
              enumerate(table.footnotes, start=1)]
    return "\n".join([*lines, r"\end{table}", ""])


def export_tables(parts: Sequence[Section], out: Path, hovers: dict[str, str]) -> list[Path]:
    """Write every table of `parts` under `out` (created); `hovers`: a comparison group's hashes by its key.
    Returns the files written, `index.csv` last."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    index = io.StringIO()
    writer = csv.writer(index, lineterminator="\n")
    writer.writerow(["table", "section", "caption", "group", "footnotes", "runs"])
    for part, number, table in _walk(parts):
        name = f"{part.key}-{number}"
        written.append(write_atomically(out / f"{name}.csv", table_csv(table)))
        written.append(write_atomically(out / f"{name}.tex", table_latex(table, part.title, name)))
        writer.writerow([name, part.title, table.caption, hovers.get(table.group, ""), " | ".join(table.footnotes),
                         " ".join(table.runs)])
    written.append(write_atomically(out / INDEX, index.getvalue()))
    return written
