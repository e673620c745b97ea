"""The paper's own numbers for the InternVL3.5 family (arXiv 2604.04929, appendix B.1): table 13, mean generated
tokens per model and prompt, and table 14, scores (%) per model and prompt, on the six benchmarks. The report shows
them beside the measured tables 13 and 14, as the H100 latency tables are imported beside measured profiles.

Transcribed from the paper's text. Which of table 14's numbers are S2 numbers: "unless otherwise noted (marked with
†), all Explain (E) and Reasoning (R) results reported in this paper adopt S2" (section 5.1), and table 14 marks
only MMMU's E and R with † ("original results without 2-stage strategy"). So its E and R values are S2 numbers,
but MMMU's, and S is a single pass. Table 13 counts generated tokens and is marked neither way."""

from __future__ import annotations

from mai.dashboards.charts import Table

BENCHMARKS = ("pope", "mmmu", "mmbench", "chartqa", "infovqa", "realworldqa")
PROMPTS = ("S", "E", "R")
SOURCE = "arXiv 2604.04929, appendix B.1"
PaperTable = dict[str, tuple[float, ...]]

# model -> 18 values: per benchmark (in BENCHMARKS order), prompts S, E, R
TABLE_13_TOKENS: PaperTable = {
    "InternVL3.5-1B": (1.1, 26.0, 39.7, 2.5, 302.2, 425.8, 3.9, 31.1, 82.3, 3.5, 37.9, 66.2, 3.5, 57.8, 42.5,
                       1.4, 36.4, 69.5),
    "InternVL3.5-2B": (1.0, 12.2, 45.2, 262.2, 389.9, 508.8, 14.0, 66.6, 163.1, 3.5, 121.4, 143.3, 4.4, 78.2, 137.6,
                       1.8, 67.6, 122.5),
    "InternVL3.5-4B": (1.0, 23.3, 57.1, 5.9, 358.9, 491.7, 2.3, 55.1, 154.7, 3.6, 173.4, 200.1, 3.9, 152.6, 181.6,
                       1.3, 70.0, 103.9),
    "InternVL3.5-8B": (1.1, 30.5, 46.1, 10.6, 262.0, 385.5, 2.2, 49.5, 141.7, 3.9, 120.3, 158.2, 3.5, 108.6, 142.0,
                       1.6, 54.3, 75.7),
    "InternVL3.5-14B": (1.4, 19.3, 47.0, 11.2, 419.0, 484.1, 2.5, 46.7, 161.0, 3.6, 126.7, 147.7, 3.4, 52.5, 117.6,
                        3.8, 60.8, 71.9),
}
TABLE_14_SCORES: PaperTable = {
    "InternVL3.5-1B": (83.8, 85.6, 83.0, 39.3, 43.0, 41.6, 68.2, 67.8, 68.1, 70.7, 65.5, 67.2, 56.1, 51.9, 51.7,
                       51.9, 58.3, 56.1),
    "InternVL3.5-2B": (88.9, 89.3, 90.7, 51.2, 52.0, 54.3, 75.7, 78.4, 77.1, 80.9, 82.7, 85.5, 41.4, 65.5, 65.8,
                       50.2, 55.4, 48.8),
    "InternVL3.5-4B": (88.8, 93.1, 91.7, 55.8, 60.4, 59.4, 76.5, 81.7, 82.5, 83.7, 88.6, 87.8, 68.9, 73.6, 73.9,
                       59.5, 60.7, 42.6),
    "InternVL3.5-8B": (88.6, 90.7, 88.5, 56.8, 60.9, 60.2, 74.7, 83.0, 83.5, 77.2, 83.9, 83.8, 57.4, 74.7, 75.4,
                       59.9, 63.8, 58.8),
    "InternVL3.5-14B": (85.8, 86.5, 88.3, 58.2, 62.2, 61.6, 82.8, 84.0, 83.7, 87.3, 88.8, 88.4, 69.6, 74.1, 77.1,
                        52.8, 67.7, 67.8),
}


def paper_uses_s2(benchmark: str, prompt: str) -> bool:
    """Whether the paper's table 14 value for this benchmark and prompt is an S2 number: E and R are, but MMMU's
    (its dagger); S is one pass."""
    return prompt in ("E", "R") and benchmark != "mmmu"


def _paper_name(model: str) -> str:
    """'OpenGVLab/InternVL3_5-8B-HF', '/ckpt/internvl3_5-8b-hf/' -> 'internvl3.5-8b': the last path part, lower case
    (hub ids and directory names vary in case), the hub's underscore for the version's dot, no '-hf' suffix."""
    return model.rstrip("/").split("/")[-1].lower().removesuffix("-hf").replace("internvl3_5", "internvl3.5")


def paper_value(table: PaperTable, model: str, benchmark: str, prompt: str) -> float | None:
    """The paper's value for a model named like the paper's (`InternVL3.5-8B`), also as the official hub id or a
    local directory named like it, in any case (`OpenGVLab/InternVL3_5-8B-HF`: the hub writes the version with an
    underscore), or None."""
    names = {_paper_name(name): name for name in table}
    name = names.get(_paper_name(model))
    if name is None or benchmark not in BENCHMARKS or prompt not in PROMPTS:
        return None
    return table[name][BENCHMARKS.index(benchmark) * len(PROMPTS) + PROMPTS.index(prompt)]


def reference_table(table: PaperTable, what: str) -> Table:
    columns = [f"{b} {p}" for b in BENCHMARKS for p in PROMPTS]
    return Table(["model (paper)", *columns], [[model, *values] for model, values in table.items()],
                 caption=f"The paper's {what} ({SOURCE}), for comparison")
