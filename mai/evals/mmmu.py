"""MMMU (lmms-lab-encoder/MMMU, split validation, 900 rows: 30 subjects x 30 questions).

Hub columns: id (`validation_<Subject>_<n>`), question, options (a Python-list literal), explanation,
image_1..image_7, img_type, answer (a letter, or free text for open questions), topic_difficulty,
question_type (`multiple-choice` / `open`), subfield.

Prompt as LMMs-Eval builds it: multiple choice `"{question}\\n{A. opt\\nB. opt}\\n\\n{instruction}"`, open
`"{question}\\n\\n{instruction}"`; `<image k>` markers stay in the text (`interleaved_format: false`); the
images are the ones the question or options reference, de-duplicated, in name order (image_1 < image_2).

Scorer profiles (an unparseable multiple-choice answer is never replaced by a random letter: it scores 0
and counts as unparsed, in every profile):
- lmms-eval: LMMs-Eval's parser: the last `Answer: X` marker; else `(X)`; else `X ` (no leading space);
  else `X.`; else (responses over 5 words) an option's text; several hits -> the last occurrence.
  Open answers: MMMU's `parse_open_response` + `eval_open` over the whole candidate list (as fixed in
  LMMs-Eval PR #1471, Aug 2026).
- official: the MMMU repository's `eval_utils.py`: `(X)`, else ` X ` (spaces both sides), else option
  text; no `Answer:` marker, no `X.` rule. Open answers as above.
- lmms-eval-2025: LMMs-Eval from PR #724 (Jun 2025) to PR #1471 (Aug 2026): open answers were reduced to
  one string that `eval_open` walked character by character, so every open question scored 0.
Aggregates: accuracy overall (micro), per subject, per domain (MMMU's six), per question type.
"""

from __future__ import annotations

import ast
import math
import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, DecimalException

from mai.answers import answer_span
from mai.evals.base import BadRow, HubRow, Metric, RowFields, ScoredSample, row_id
from mai.evals.common import (
    HubBenchmark,
    grouped_mean,
    images_from,
    optional_text,
    overall_mean,
    resolve_profile,
    text_field,
    unparsed_rate,
)
from mai.types import AnswerStyle, Sample

IMAGE_COLUMNS = tuple(f"image_{k}" for k in range(1, 8))
DOMAINS = {
    "Art and Design": ("Art", "Art_Theory", "Design", "Music"),
    "Business": ("Accounting", "Economics", "Finance", "Manage", "Marketing"),
    "Science": ("Biology", "Chemistry", "Geography", "Math", "Physics"),
    "Health and Medicine": ("Basic_Medical_Science", "Clinical_Medicine", "Diagnostics_and_Laboratory_Medicine",
                            "Pharmacy", "Public_Health"),
    "Humanities and Social Science": ("History", "Literature", "Sociology", "Psychology"),
    "Tech and Engineering": ("Agriculture", "Architecture_and_Engineering", "Computer_Science", "Electronics",
                             "Energy_and_Power", "Materials", "Mechanical_Engineering"),
}
DOMAIN_OF = {subject: domain for domain, subjects in DOMAINS.items() for subject in subjects}
_ANSWER_MARKER = re.compile(r"(?i:answer)\s*[:：]\s*[\*\(\[]*([A-Z])\b")
_IMAGE_REF = re.compile(r"<image (\d+)>")


class MMMUBenchmark(HubBenchmark):
    name = "mmmu"
    version = "1"
    agreement_rule = "option_letter_or_open_match"
    required_columns = ("id", "question", "options", "answer", "question_type", "image_1")
    image_columns = IMAGE_COLUMNS
    id_column = "id"
    profiles = ("lmms-eval", "official", "lmms-eval-2025")

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        question, kind = text_field(row, "question"), text_field(row, "question_type")
        if kind not in ("multiple-choice", "open"):
            raise BadRow(f"column 'question_type' must be 'multiple-choice' or 'open', got '{kind}'")
        options = _parse_options(row.get("options")) if kind == "multiple-choice" else ()
        answer = text_field(row, "answer").strip()
        if kind == "multiple-choice" and answer not in _letters(len(options)):
            raise BadRow(f"answer '{answer}' is not one of the option letters {_letters(len(options))}")
        referenced = sorted({f"image_{k}" for k in _IMAGE_REF.findall(question + " ".join(options))})
        if with_images:
            _check_referenced(row, referenced)
        images = images_from(row, tuple(referenced), with_images, required=len(referenced)) if referenced else ()
        subject = _subject(text_field(row, "id"))
        meta = (("question_type", kind), ("subfield", optional_text(row, "subfield")), ("subject", subject))
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=question, options=options,
                         answer=answer, images=images, category=subject, meta=meta)

    def answer_style(self, sample: Sample) -> AnswerStyle:
        return "letter" if sample.options else "phrase"

    def format_question(self, sample: Sample) -> str:
        """Ends with a newline: with the instruction appended after "\\n", the blank line LMMs-Eval puts
        before its prompt is reproduced."""
        if sample.options:
            block = "\n".join(f"{letter}. {option}" for letter, option in zip(_letters(len(sample.options)), sample.options))
            return f"{sample.question}\n{block}\n"
        return f"{sample.question}\n"

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        chosen = resolve_profile(profile, self.profiles)
        span = answer_span(text).strip()
        if sample.options:
            return parse_multi_choice(span, dict(zip(_letters(len(sample.options)), sample.options)), chosen)
        return span or None  # open answers keep their text; scoring extracts the candidates

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        if a is None or b is None:
            return False
        if sample.options:
            return a == b
        return bool(set(parse_open_response(a)) & set(parse_open_response(b)))

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        chosen = resolve_profile(profile, self.profiles)
        if parsed is None:
            return 0.0
        if sample.options:
            return 1.0 if parsed == sample.answer else 0.0
        if chosen == "lmms-eval-2025":
            return 0.0
        return 1.0 if eval_open(sample.answer, parse_open_response(parsed)) else 0.0

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        return (overall_mean(scored, "accuracy")
                + grouped_mean(scored, "accuracy", lambda s: DOMAIN_OF.get(s.sample.category, "other"), "domain")
                + grouped_mean(scored, "accuracy", lambda s: s.sample.category, "subject")
                + grouped_mean(scored, "accuracy", lambda s: s.sample.get("question_type"), "question_type")
                + unparsed_rate(scored))


def _check_referenced(row: HubRow, referenced: list[str]) -> None:
    """Names the `<image k>` the text references and the row lacks (not just the first image column)."""
    missing = [column for column in referenced if _holds_no_image(row.get(column))]
    if missing:
        markers = ", ".join(f"<image {column.split('_')[1]}>" for column in missing)
        raise BadRow(f"the question or options reference {markers} but column(s) {missing} hold no image")


def _holds_no_image(cell: object) -> bool:
    return cell in (None, {}, b"") or (isinstance(cell, dict) and not cell.get("bytes"))


def _letters(n: int) -> tuple[str, ...]:
    return tuple(chr(ord("A") + i) for i in range(n))


def _parse_options(value: object) -> tuple[str, ...]:
    try:
        options = ast.literal_eval(value) if isinstance(value, str) else value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as error:
        # MemoryError / RecursionError: the parser's answer to brackets or signs nested thousands deep
        raise BadRow(f"column 'options' is not a list literal: {type(error).__name__}: {str(error)[:200]}") from error
    if not isinstance(options, (list, tuple)) or not options:
        raise BadRow("column 'options' must list at least one option for a multiple-choice question")
    return tuple(str(option) for option in options)


def _subject(sample_id: str) -> str:
    split = sample_id.split("_")[0]
    match = re.match(rf"^{re.escape(split)}_(.+?)_\d+$", sample_id)
    if not match:
        raise BadRow(f"column 'id' '{sample_id}' is not of the form <split>_<Subject>_<n>")
    return match.group(1)


def parse_multi_choice(response: str, index2ans: dict[str, str], profile: str) -> str | None:
    """MMMU's `parse_multi_choice_response` (profile variants in the module docstring), without the random
    fallback."""
    choices = list(index2ans)
    if profile != "official":
        markers: list[str] = [m for m in _ANSWER_MARKER.findall(response) if m in choices]  # one group: str
        if markers:
            return markers[-1]
    for char in [",", ".", "!", "?", ";", ":", "'"]:
        response = response.strip(char)
    response = f" {response} "
    by_letter, bracketed = [c for c in choices if f"({c})" in response], True
    if not by_letter:
        bracketed = False
        spaced = " {} " if profile == "official" else "{} "
        by_letter = [c for c in choices if spaced.format(c) in response]
        if not by_letter and profile != "official":
            by_letter = [c for c in choices if f"{c}." in response]
    if len(by_letter) == 1:
        return by_letter[0]
    if by_letter:
        pattern = "({})" if bracketed else " {} "
        positions = [response.rfind(pattern.format(c)) for c in by_letter]
        return by_letter[positions.index(max(positions))]
    if len(response.split()) <= 5:
        return None
    by_text = [c for c, text in index2ans.items() if text.lower() in response.lower()]
    if not by_text:
        return None
    positions = [response.lower().rfind(index2ans[c].lower()) for c in by_text]
    return by_text[positions.index(max(positions))]


# MMMU's `extract_numbers` patterns (commas, scientific, simple). The `(?<!\d)` before a leading run of digits
# changes no result: findall only tries a digit right after a digit when the try one character earlier, which
# could use every continuation it can, has failed (a match never ends just before a digit). It skips those
# doomed tries, each as long as the rest of the run, so a run of n digits costs O(n) instead of O(n^2)
# (40,000 digits took more than 20 s).
_NUMBER_PATTERNS = (
    re.compile(r"-?\b\d{1,3}(?:,\d{3})+\b"),
    re.compile(r"-?(?<!\d)\d+(?:\.\d+)?[eE][+-]?\d+"),
    re.compile(r"-?(?:(?<!\d)\d+\.\d+|\.\d+|(?<!\d)\d+\b)(?![eE][+-]?\d+)(?![,\d])"),
)
# what each number pattern cannot match without (a comma and three digits; an exponent), searched for first: a
# literal prefix is found at memchr speed, so a long text without one is not scanned by the slower pattern
_NEEDS = (re.compile(r",\d{3}"), re.compile(r"[eE][+-]?\d"), None)
_DIGIT = re.compile(r"\d")
_INDICATORS = ["could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result "]


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _number_key(text: str) -> str:
    """A number rounded to 2 decimals, written as MMMU's `round(float(x), 2)` writes it; a number past the float
    range (a long digit string, which a float holds only as infinity, so any two would be equal) exactly, in
    Decimal, rounded the same way (half to even)."""
    cleaned = text.replace(",", "")
    value = float(cleaned)
    if not math.isinf(value):
        return repr(round(value, 2) + 0.0)  # + 0.0: -0.0 becomes 0.0, which MMMU's float comparison equals
    try:
        exact = Decimal(cleaned)
    except DecimalException:  # an exponent past even Decimal's range: the text itself is the key
        return cleaned.strip().lower()
    if not exact.is_finite():
        return repr(value)
    # the text's length bounds the number of digits, so this precision holds the number exactly; a number whose
    # rounded form would need more digits than that has an exponent >= 0 and nothing to round
    context = Context(prec=len(cleaned) + 5, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])
    if exact.adjusted() + 3 <= context.prec:
        exact = exact.quantize(Decimal("0.01"), context=context)
    return str(exact.normalize(context))


def normalize_str(text: str) -> list[str]:
    """MMMU's normalisation: a number becomes its rounded value (encoded `#<value>`, so a text candidate never
    reads as a number: see `eval_open`), other text is lower-cased (a single character padded with a space)."""
    text = text.strip()
    if _is_number(text):
        return [_NUMBER + _number_key(text)]
    text = text.lower()
    return [" " + text, text + " "] if len(text) == 1 else [text]


def _numbers(key: str) -> list[str]:
    """Every match of MMMU's three number patterns in the key, in pattern order."""
    if _DIGIT.search(key) is None:
        return []
    return [number for pattern, needs in zip(_NUMBER_PATTERNS, _NEEDS, strict=True)
            if needs is None or needs.search(key) is not None for number in pattern.findall(key)]


# How much of an open answer is parsed: its last 8 Ki characters. MMMU's parse makes a candidate of every line's key
# phrase and every number in it, each normalised (a float, a Decimal past the float range): the work grows with the
# count of lines and numbers, ~0.8 s for a megabyte of `is 1\n` lines. An open answer is a short phrase (the `[[...]]`
# span, or an S2/RT answer of at most a few dozen tokens; a whole R output without brackets is ~4 Ki characters at
# the default 1024-token budget), so every real answer is parsed whole; a longer one is read from its end, where the
# final answer stands.
MAX_OPEN_ANSWER_CHARS = 8192


def parse_open_response(response: str) -> list[str]:
    """MMMU's `parse_open_response`: key phrases after indicator words, plus every number, normalised.
    Candidates are returned as strings (numbers keep their rounded float form, e.g. '0.5'). Only the last
    MAX_OPEN_ANSWER_CHARS characters of the response are read."""
    response = response[-MAX_OPEN_ANSWER_CHARS:].strip().strip(".").lower()
    pieces = re.split(r"\.\s(?=[A-Z])|\n", response)
    keys = []
    for position, piece in enumerate(pieces):
        indicators = _INDICATORS + (["="] if position == len(pieces) - 1 else [])
        tails = [piece.rsplit(i, 1)[-1].strip() for i in indicators if i in piece]
        shortest = min(tails, key=len) if tails else ""
        if shortest and shortest.strip() not in [":", ",", ".", "!", "?", ";", ":", "'"]:
            keys.append(shortest)
    if not keys:
        keys = [response]
    candidates: list[str] = list(keys)
    for key in keys:
        candidates.extend(_numbers(key))
    # each distinct candidate once: a flood of the same number normalises one number
    normalised = {value for candidate in set(candidates) for value in normalize_str(candidate)}
    return sorted(normalised)


# Numbers are marked with a character no stripped, lower-cased text candidate starts with (a control character
# that `str.strip` removes), so text such as '#½' is never read as a number.
_NUMBER = "\x1f#"


def eval_open(gold: str, candidates: list[str]) -> bool:
    """A string gold must be contained in a string candidate; a numeric gold must equal a numeric one (NaN
    equals nothing, as in MMMU's float comparison)."""
    answers = normalize_str(gold)
    numbers = {a for a in answers if a.startswith(_NUMBER) and a != _NUMBER + "nan"}
    texts = [a for a in answers if not a.startswith(_NUMBER)]
    for candidate in candidates:
        if candidate.startswith(_NUMBER):
            if candidate in numbers:
                return True
        elif any(a in candidate for a in texts):
            return True
    return False
