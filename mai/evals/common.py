"""Helpers shared by the paper's six benchmarks: their common defaults (`HubBenchmark`), row access in hub schemas,
metric helpers, ANLS."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from rapidfuzz.distance import Levenshtein

from mai.evals.base import BadRow, HubRow, Metric, ScoredSample, image_bytes
from mai.types import AnswerStyle, Sample

PROFILES = ("lmms-eval", "official")


class HubBenchmark:
    """The defaults most built-in benchmarks share: one `image` column, the two scorer profiles, a phrase answer
    with the reference-answer RT template, the question as it is, and exact-match agreement and scoring."""

    image_columns: tuple[str, ...] = ("image",)
    profiles: tuple[str, ...] = PROFILES

    def answer_style(self, sample: Sample) -> AnswerStyle:
        return "phrase"

    def rt_template(self, sample: Sample) -> str:
        return "rt_reference"

    def format_question(self, sample: Sample) -> str:
        return sample.question

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        return a is not None and a == b

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        return 1.0 if parsed == sample.answer else 0.0


def resolve_profile(profile: str | None, profiles: tuple[str, ...] = PROFILES) -> str:
    chosen = profile or profiles[0]
    if chosen not in profiles:
        raise ValueError(f"unknown scorer profile '{chosen}' (choose one of {list(profiles)})")
    return chosen


def images_from(row: HubRow, columns: tuple[str, ...], with_images: bool, required: int = 1) -> tuple[bytes, ...]:
    """Encoded images of the row's present image columns, in column order."""
    if not with_images:
        return ()
    found = tuple(image_bytes(row[c], c) for c in columns if row.get(c) not in (None, {}, b""))
    if len(found) < required:
        raise BadRow(f"column '{columns[0]}' holds no image bytes")
    return found


def text_field(row: HubRow, column: str) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):  # NaN from pandas-made files
        raise BadRow(f"column '{column}' is missing")
    text = str(value)
    if not text.strip():
        raise BadRow(f"column '{column}' is empty")
    return text


def optional_text(row: HubRow, column: str) -> str:
    """Hub exports encode missing MMBench options and hints as None, NaN or the string 'nan'."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = str(value)
    return "" if text.strip().lower() == "nan" else text


def grouped_mean(scored: list[ScoredSample], name: str, key: Callable[[ScoredSample], str],
                 prefix: str) -> list[Metric]:
    groups: dict[str, list[float]] = {}
    for item in scored:
        groups.setdefault(f"{prefix}={key(item)}", []).append(item.score)
    return [Metric(name, sum(v) / len(v), len(v), subset) for subset, v in sorted(groups.items())]


def overall_mean(scored: list[ScoredSample], name: str) -> list[Metric]:
    return [Metric(name, sum(s.score for s in scored) / len(scored), len(scored))] if scored else []


def unparsed_rate(scored: list[ScoredSample]) -> list[Metric]:
    return [Metric("unparsed_rate", sum(s.parsed is None for s in scored) / len(scored), len(scored))] if scored else []


def mean_accuracy(scored: list[ScoredSample]) -> list[Metric]:
    """Accuracy overall and per category, plus the share of unparsed answers (which score 0)."""
    return (overall_mean(scored, "accuracy") + grouped_mean(scored, "accuracy", lambda s: s.sample.category, "category")
            + unparsed_rate(scored))


# The most cells (the longer text's length x the band of edits searched) one distance with a cutoff computes: the
# exact distance is quadratic in the length, and rapidfuzz's banded bit-parallel algorithm takes about 0.02 s for
# 2.5e8 cells on one core here (two different 900 KB answers in full: ~10 s). Within it every pair of texts up to
# ~22,000 characters is exact (a reasoning budget of 1,024 tokens is ~4,000), and longer pairs are exact up to
# 2.5e8 / length edits (250 for a megabyte).
AFFORDABLE_DISTANCE_CELLS = 250_000_000


def levenshtein(a: str, b: str, cutoff: int | None = None) -> int:
    """Unit-cost edit distance over code points (insert, delete, substitute), as the RRC script's pure-Python
    one; rapidfuzz computes the same number in C with a bit-parallel algorithm (an 8k x 8k pair: ~0.002 s
    instead of ~20 s). With `cutoff`, any distance above it is returned as `cutoff + 1` (rapidfuzz then stops
    early, e.g. when the lengths alone differ by more), and so is a distance above what one call affords
    (AFFORDABLE_DISTANCE_CELLS over the longer length: two megabyte texts more than 250 edits apart count as
    apart), so that no pair of answers stalls scoring."""
    if cutoff is None:
        return int(Levenshtein.distance(a, b))
    affordable = AFFORDABLE_DISTANCE_CELLS // max(len(a), len(b), 1)
    # score_hint: rapidfuzz searches a band of 64 edits first and doubles it up to the cutoff, so a pair a few edits
    # apart costs what those edits need, not what the cutoff allows
    distance = int(Levenshtein.distance(a, b, score_cutoff=min(cutoff, affordable), score_hint=64))
    return distance if distance <= min(cutoff, affordable) else cutoff + 1


def anls(prediction: str, references: tuple[str, ...], profile: str, threshold: float = 0.5) -> float:
    """Average normalised Levenshtein similarity of one answer (best reference).

    lmms-eval and official (LMMs-Eval's `anls`, a copy of the DocVQA/InfographicVQA RRC evaluation script
    via Qwen-VL): both strings lower-cased with whitespace collapsed for the distance, but the length
    divides by the *raw* lengths; a similarity below 0.5 becomes 0, so exactly 0.5 is kept.
    anls-paper (the ST-VQA paper's formula, s = 1 - NL if NL < 0.5 else 0): normalised strings for both
    distance and length, and a normalised distance of exactly 0.5 gives 0."""
    values = []
    # A normalised distance above max(threshold, 1 - threshold) scores 0 under every profile, whichever reference
    # it belongs to, so the exact distance is needed only up to that share of the length; a larger one is
    # computed as just over it (`levenshtein`'s cutoff), which gives the same score and saves time.
    bound = max(threshold, 1.0 - threshold)
    for reference in references:
        gt, det = " ".join(reference.strip().lower().split()), " ".join(prediction.strip().lower().split())
        if profile != "anls-paper":
            length = max(len(reference.upper()), len(prediction.upper()))
        else:
            length = max(len(gt), len(det))
        if length == 0:
            values.append(0.0)
            continue
        values.append(levenshtein(gt, det, cutoff=math.ceil(bound * length)) / length)
    if not values:
        return 0.0
    normalised = min(values)
    similarity = 1.0 - normalised
    if profile != "anls-paper":
        return 0.0 if similarity < threshold else similarity
    return similarity if normalised < threshold else 0.0


_MCQ_DEFAULT_CHOICES = tuple("ABCDEFGH")
_ANSWER_PHRASES = (
    "the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
    "best answer is", "the correct option is", "correct option is", "the best option is", "best option is",
    "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select", "i pick",
    "my answer is", "my choice is", "옵션", "정답은", "답은", "답:", "答案是", "答案为", "选", "答えは",
)
# one scan that says whether any phrase occurs: the common case (none) then costs one pass instead of one `find` per
# phrase (28 passes; ~0.06 s on a megabyte of non-ASCII text)
_ANY_PHRASE = re.compile("|".join(map(re.escape, _ANSWER_PHRASES)))
_PRIORITY = {"start": 10, "end": 9, "phrase": 7, "(X)": 6, "X.": 5, "X:": 4, "X)": 3, "X ": 2, "fallback": 0}


def extract_mcq_answer(response: str, choices: tuple[str, ...] | list[str] | None = None) -> str:
    """The letter LMMs-Eval's `extract_mcq_answer` (`lmms_eval/tasks/_task_utils/mcq_extract.py`, 0.7.x, priority
    version) picks; "" when there is none. `choices` default (None or empty) as there: A to H. Candidates are
    (priority, position): the highest priority wins, then the later position (LMMs-Eval sorts both descending;
    two letters never share a position, so taking the max is the same choice)."""
    choices = tuple(choices or _MCQ_DEFAULT_CHOICES)
    text = response.strip()
    for char in ",.!?;:'\"":
        text = text.strip(char)
    text = f" {text} "
    found: list[tuple[int, int, str]] = []  # (priority, position, letter)
    for marker in ("(X)", "X.", "X:", "X)", "X "):
        for letter in choices:
            written = marker.replace("X", letter)
            if written in text:
                found.append((_PRIORITY[marker], text.rfind(written), letter))
    lowered = text.lower()
    for phrase in _ANSWER_PHRASES if _ANY_PHRASE.search(lowered) else ():
        at = lowered.find(phrase)
        if at != -1:
            found += [(_PRIORITY["phrase"], text.find(c, at + len(phrase)), c) for c in choices
                      if text.find(c, at + len(phrase)) != -1]
    bare = text.strip()
    found += [(_PRIORITY["start"], 0, c) for c in choices
              if bare.startswith(c) and (len(bare) == 1 or not bare[1].isalpha())]
    found += [(_PRIORITY["end"], len(text) - 1, c) for c in choices
              if bare.endswith(c) and (len(bare) == 1 or not bare[-2].isalpha())]
    if not found:
        found = [(_PRIORITY["fallback"], text.rfind(c), c) for c in choices if c in text]
    return max(found)[2] if found else ""
