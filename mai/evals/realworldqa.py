"""RealWorldQA (lmms-lab-encoder/RealWorldQA, split test, 765 rows).

Hub columns: question (already holding the options `A. ...` and an instruction line), answer (a letter
for multiple choice, else a word or number), image. Prompt: the stripped question, without its
"Please answer directly with only the letter of the correct option and nothing else." line (LMMs-Eval
removes it whenever a post-prompt is given, as the paper's instruction is), + the paper's instruction.

Scorer profiles (exact match, fractions):
- lmms-eval (LMMs-Eval 0.7.2, June 2026, and later): a letter answer is compared with the letter that
  `extract_mcq_answer` picks by priority (starts with the letter 10, ends with it 9, after an answer
  phrase such as "the answer is" 7, `(X)` 6, `X.` 5, `X:` 4, `X)` 3, `X ` 2; the later position wins within
  a priority; any occurrence only when nothing else matched); other answers by equality after lower(),
  strip() and removing trailing dots.
- lmms-eval-0.7.1 (LMMs-Eval up to 0.7.1, March 2026): a whole-answer number word (zero-ten) becomes its
  digits; an answer containing an option's text (punctuation removed, case-sensitive) becomes that option's
  letter (letters assigned in order of the options found in the question); then equality ignoring case and
  punctuation.
- official: the dataset ships no scorer; the plain definition: equality ignoring case, surrounding
  whitespace and punctuation.
"""

from __future__ import annotations

import re
import string

from mai.answers import answer_span
from mai.evals.base import HubRow, Metric, RowFields, ScoredSample, row_id
from mai.evals.common import (
    HubBenchmark,
    images_from,
    overall_mean,
    resolve_profile,
    text_field,
    unparsed_rate,
)
from mai.evals.common import extract_mcq_answer as _extract_mcq_answer
from mai.types import AnswerStyle, Sample

LETTER_ONLY_INSTRUCTION = "Please answer directly with only the letter of the correct option and nothing else."
MCQ_LETTERS = ("A", "B", "C", "D")
_OPTION_LINE = re.compile(r"\b([A-Z])\.\s+([^\n]*)")
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"))}


class RealWorldQABenchmark(HubBenchmark):
    name = "realworldqa"
    version = "1"
    agreement_rule = "option_letter_or_normalized_exact"
    required_columns = ("question", "answer", "image")
    id_column = "index"
    profiles = ("lmms-eval", "official", "lmms-eval-0.7.1")

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        question = text_field(row, "question").strip()
        options = tuple(text.strip() for _, text in _OPTION_LINE.findall(question))
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=question, options=(),
                         answer=text_field(row, "answer").strip(), category="mcq" if options else "open",
                         images=images_from(row, self.image_columns, with_images),
                         meta=(("option_texts", "\n".join(options)),))

    def answer_style(self, sample: Sample) -> AnswerStyle:
        return "letter" if sample.category == "mcq" else "phrase"

    def format_question(self, sample: Sample) -> str:
        return sample.question.replace(LETTER_ONLY_INSTRUCTION, "")

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        chosen = resolve_profile(profile, self.profiles)
        span = answer_span(text).strip()
        if chosen == "lmms-eval-0.7.1":
            return _filter_071(span, sample) or None
        if chosen == "lmms-eval" and sample.answer.upper() in MCQ_LETTERS:
            return extract_mcq_answer(span) or None
        return span or None

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        return a is not None and b is not None and _plain(a) == _plain(b)

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        if parsed is None:
            return 0.0
        chosen = resolve_profile(profile, self.profiles)
        if chosen == "lmms-eval":
            if sample.answer.upper() in MCQ_LETTERS:
                return 1.0 if parsed == sample.answer.upper() else 0.0
            return 1.0 if parsed.lower().strip().rstrip(".") == sample.answer.lower() else 0.0
        return 1.0 if _plain(parsed) == _plain(sample.answer) else 0.0

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        by_kind = [Metric("exact_match", m.value, m.n, f"question_type={kind}")
                   for kind in ("mcq", "open")
                   for m in overall_mean([s for s in scored if s.sample.category == kind], "exact_match")]
        return overall_mean(scored, "exact_match") + by_kind + unparsed_rate(scored)


_NOT_WORD_RUN = re.compile(r"[^\w\s]+")  # LMMs-Eval's r"[^\w\s]", one match per run instead of per character
_PUNCTUATION_TABLE = str.maketrans("", "", string.punctuation)
_PUNCTUATION_RUN = re.compile(f"[{re.escape(string.punctuation)}]+")


def _plain(text: str) -> str:
    """Lower case, punctuation removed, surrounding whitespace stripped. `str.translate` is fast only on ASCII
    text (a megabyte of 'é' takes ~0.1 s); a regex removes the same characters from other text in ~0.01 s."""
    lowered = text.lower()
    if lowered.isascii():
        return lowered.translate(_PUNCTUATION_TABLE).strip()
    return _PUNCTUATION_RUN.sub("", lowered).strip()


def _filter_071(response: str, sample: Sample) -> str:
    response = _NUMBER_WORDS.get(response.lower(), response)
    texts = [t for t in sample.get("option_texts").split("\n") if t]
    cleaned = _NOT_WORD_RUN.sub("", response).strip()
    if texts:
        match = re.compile("|".join(re.escape(t) for t in texts)).search(cleaned)
        if match and match.group() in texts:
            return chr(ord("A") + texts.index(match.group()))
    return cleaned


def extract_mcq_answer(response: str, choices: tuple[str, ...] = MCQ_LETTERS) -> str:
    """The letter LMMs-Eval's `extract_mcq_answer` (0.7.2+) picks among A-D; "" when there is none."""
    return _extract_mcq_answer(response, choices)
