"""`mai report --tables DIR`: every table of the report, as CSV and as LaTeX (booktabs), ready for a paper.

Generic over the report's sections: whatever tables a section builds are written, so a table added later exports
with no change here. Per table `<section>-<k>.csv` (a header row, then one row per table row, the cells as the
page shows them: a score cell keeps its interval and n, "83.1 [76.5, 88.9] n=160") and `<section>-<k>.tex` (a
`table` float with the caption, a booktabs `tabular` and the footnotes under it, sized for a two-column page at 7 pt
or more: see `table_latex`), a narrow variant `<section>-<k>-narrow` of a table that names one (tables 11 and 12:
the paper's own columns), and one `index.csv` naming each table's file, section, caption, the hashes of its
comparison group, its footnotes and the runs its cells read.

CSV through the standard library's `csv` module; LaTeX written here: pandas is no direct dependency of mai (it
comes in through `datasets` only), and neither pandas' nor tabulate's LaTeX splits a wide table into parts that fit
a page; a booktabs tabular is a dozen lines with the escaping below."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mai.dashboards.charts import Cell, Section, Table, mark
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
    for sign, digit in _MARKS.items():
        text = text.replace(sign, rf"\textsuperscript{{{digit}}}")
    return re.sub(r"`([^`]*)`", r"\\texttt{\1}", text)  # a command, as a paper sets one (` is an opening quote)


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


# what a document that \input's the tables needs in its preamble (array: wrapped columns set ragged right)
PACKAGES = r"\usepackage{booktabs,graphicx,array}"

# How a table fits a page of a two-column article (10 pt, letter paper: a column 229.5 pt wide, the text 469 pt
# wide, 592 pt tall): set in \small (9 pt) and never scaled below 7 pt, a table goes into one column where it fits at
# 7/9 of its size, across both columns (table*) where it fits that way, else in parts that repeat the first column;
# and a part taller than a page goes on in another float, its header repeated (a float never breaks over pages).
# Sizes are estimated here from the text (LaTeX cannot split a tabular); LaTeX measures each piece, scales one still
# wider than its line down to it and writes the measure to the log (`mai-table ...`) for a test to read back.
COLUMN_PT, TEXT_PT, PAGE_PT = 229.5, 469.0, 592.0
SMALL_PT, SMALLEST_PT = 9.0, 7.0
CHAR_PT = 4.7  # mean width of a character in \small (measured: 87 characters of cells, 408 pt)
PAD_PT = 12.0  # \tabcolsep, both sides of a column
LINE_PT = 11.5  # a line of a \small row; a \footnotesize note line about 10 pt
WRAP_CHARS = 24  # a longer cell wraps, ragged right, in a column this wide (or its longest word's)
MARGIN = 0.9  # the estimates' slack: capitals are wider than the mean, words do not fill a wrapped line


@dataclass(frozen=True)
class _Column:
    spec: str     # the tabular's column type
    width: float  # estimated, pt
    chars: int    # characters on a line (0: one line whatever the length)


def _column(cells: list[str]) -> _Column:
    """One line where the column's longest cell is short, else wrapped at WRAP_CHARS (or its longest word)."""
    longest = max((len(c) for c in cells), default=1)
    if longest <= WRAP_CHARS:
        return _Column("l", longest * CHAR_PT + PAD_PT, 0)
    chars = max([WRAP_CHARS, *(len(word) for c in cells for word in c.split())])
    return _Column(rf">{{\raggedright\arraybackslash}}p{{{chars * CHAR_PT:.0f}pt}}", chars * CHAR_PT + PAD_PT, chars)


def _parts(widths: list[float]) -> tuple[str, list[list[int]]]:
    """The float (table: one column, table*: both) and the parts, each a list of column indices, that set columns
    this wide (pt) at 7 pt or more."""
    least = SMALLEST_PT / SMALL_PT / MARGIN  # the scale a part must not need more shrinking than
    everything = list(range(len(widths)))
    if sum(widths) * least <= COLUMN_PT:
        return "table", [everything]
    if sum(widths) * least <= TEXT_PT:
        return "table*", [everything]
    parts: list[list[int]] = [[0]]
    for index in everything[1:]:
        if len(parts[-1]) > 1 and sum(widths[i] for i in parts[-1] + [index]) * least > TEXT_PT:
            parts.append([0])
        parts[-1].append(index)
    return "table*", parts


def _height(row: list[str], columns: list[_Column], part: list[int]) -> float:
    return LINE_PT * max(math.ceil(len(row[i]) / (columns[i].chars * MARGIN)) if columns[i].chars else 1
                         for i in part)


def _pieces(rows: list[list[str]], columns: list[_Column], part: list[int], room: float) -> list[list[int]]:
    """The part's body rows (indices) in pieces that each fit a float `room` pt tall (a row never splits)."""
    pieces: list[list[int]] = [[]]
    used = 0.0
    for index, row in enumerate(rows):
        height = _height(row, columns, part)
        if pieces[-1] and used + height > room:
            pieces.append([])
            used = 0.0
        pieces[-1].append(index)
        used += height
    return pieces


def table_latex(table: Table, title: str, label: str) -> str:
    """A booktabs table: caption (the section's heading and the table's caption, with how it is set when it spans
    both columns or comes in pieces), header, rows, footnotes."""
    plain = [list(table.columns), *([cell_text(c) for c in row] for row in table.rows)]  # what sizes are read from
    cells = [[latex_escape(c) for c in row] for row in plain]
    columns = [_column([row[i] for row in plain]) for i in range(len(table.columns))]
    float_, parts = _parts([c.width for c in columns])
    notes = [f"{number}. {note}" for number, note in enumerate(table.footnotes, start=1)]
    noted = sum(math.ceil(len(n) * CHAR_PT * MARGIN / TEXT_PT) * 10.0 for n in notes)
    room = PAGE_PT * MARGIN - 4 * LINE_PT - _height(plain[0], columns, list(range(len(columns))))  # caption, rules
    pieces = [(part, rows) for part in parts for rows in _pieces(plain[1:], columns, part, room)]
    if sum(_height(plain[1 + r], columns, pieces[-1][0]) for r in pieces[-1][1]) + noted > room:
        pieces.append(([], []))  # the notes in a float of their own
    caption = latex_escape((table.caption or title).rstrip(".")) + (
        f". In {len(pieces)} pieces, each part with the first column." if len(pieces) > 1 else
        ". Set across both columns." if float_ == "table*" else "")
    lines = [f"% {latex_escape(title)}", f"% needs {PACKAGES}", rf"\begin{{{float_}}}[htbp]", r"\centering",
             r"\small", rf"\caption{{{caption}}}", rf"\label{{tab:{label}}}"]
    for number, (part, rows) in enumerate(pieces, start=1):
        if number > 1:  # each piece its own float: a float never breaks over pages
            lines += [rf"\end{{{float_}}}", rf"\begin{{{float_}}}[htbp]", r"\centering", r"\small",
                      rf"Table~\thetable{{}} continued ({number} of {len(pieces)}).\par\medskip"]
        if not part:
            continue
        lines += [r"\sbox0{%", rf"\begin{{tabular}}{{{''.join(columns[i].spec for i in part)}}}", r"\toprule",
                  " & ".join(cells[0][i] for i in part) + r" \\", r"\midrule",
                  *(" & ".join(cells[1 + r][i] for i in part) + r" \\" for r in rows),
                  r"\bottomrule", r"\end{tabular}}%",
                  rf"\typeout{{mai-table {label} piece {number}: natural \the\wd0, line \the\linewidth}}%",
                  r"\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi"]
    lines += [r"\par\raggedright\footnotesize", *(rf"{latex_escape(note)}\par" for note in notes)]
    return "\n".join([*lines, rf"\end{{{float_}}}", ""])


def narrow(table: Table) -> Table | None:
    """The table's narrow variant (the paper's own columns and rows, `Table.narrow`), or None; its footnotes only
    those its cells mark, numbered anew."""
    keep = [i for i, c in enumerate(table.columns) if c in table.narrow]
    if not keep:
        return None
    notes: list[str] = []

    def renumbered(value: Cell) -> Cell:
        text = cell_text(value)
        found = _MARK.search(text)
        if found is None:
            return value
        old = found.group(0)
        number = int(old.strip("[]")) if old.startswith("[") else "¹²³⁴⁵⁶⁷⁸⁹".index(old) + 1
        note = table.footnotes[number - 1]
        return text[:found.start()] + _marked(notes, note)

    rows = [[renumbered(row[i]) for i in keep] for row in table.rows[:table.narrow_rows]]
    return Table([table.columns[i] for i in keep], rows, f"{table.caption} (the paper's columns)",
                 group=table.group, runs=table.runs, footnotes=notes)


# a footnote's mark at the end of a cell (mai.dashboards.charts.mark)
_MARK = re.compile(r"(?:[¹²³⁴⁵⁶⁷⁸⁹]|\[\d+\])$")


def _marked(notes: list[str], note: str) -> str:
    """The mark of `note` in `notes` (added when new)."""
    if note not in notes:
        notes.append(note)
    return mark(notes.index(note) + 1)


def export_tables(parts: Sequence[Section], out: Path, hovers: dict[str, str]) -> list[Path]:
    """Write every table of `parts` under `out` (created); `hovers`: a comparison group's hashes by its key.
    Returns the files written, `index.csv` last."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    index = io.StringIO()
    writer = csv.writer(index, lineterminator="\n")
    writer.writerow(["table", "section", "caption", "group", "footnotes", "runs"])
    for part, number, whole in _walk(parts):
        for name, table in ((f"{part.key}-{number}", whole), (f"{part.key}-{number}-narrow", narrow(whole))):
            if table is None:
                continue
            written.append(write_atomically(out / f"{name}.csv", table_csv(table)))
            written.append(write_atomically(out / f"{name}.tex", table_latex(table, part.title, name)))
            writer.writerow([name, part.title, table.caption, hovers.get(table.group, ""),
                             " | ".join(table.footnotes), " ".join(table.runs)])
    written.append(write_atomically(out / INDEX, index.getvalue()))
    return written
