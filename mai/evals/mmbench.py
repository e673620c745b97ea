"""MMBench English dev (lmms-lab-encoder/MMBench, config en, split dev, 4329 rows incl. circular copies).

Hub columns: index, question, hint, A, B, C, D (missing options are None / NaN / "nan"), answer (a
letter), category, L2-category, source, split, comment, image. Each original question appears with its
options rotated under indices `index + k * 1_000_000`.

Prompt as LMMs-Eval builds it: `"{hint} {question} There are several options:\\nA. ...\\nB. ..."` (the
hint and its space only when present; options sorted by letter, empty / NaN / "nan" ones skipped), a blank
line, then the paper's letter instruction in place of LMMs-Eval's post-prompt.

Per-row letter extraction (`can_infer` = option letter, else option text):
- lmms-eval (LMMs-Eval 0.7.x offline task `mmbench_en_dev_static`, `MMBench_Evaluator.eval_sub_data` with
  `static_only`): first `can_infer`: whitespace-split words; exactly one bare letter A-E is the answer (unless
  an `A` among more than 3 words, which may be an article); else exactly one letter written as `X.` `X,` `X:`
  `X)` `X).` `(X)` `(X).` `:X` ...; else exactly one option text contained in the output. An answer that
  `can_infer` leaves open goes to `extract_mcq_answer` (`_task_utils/mcq_extract.py`) over the present
  letters among A-D in order: a letter starting the text first, then ending it, after an answer phrase,
  `(X)`, `X.`, `X:`, `X)`, `X `, the later position winning within a rule, any occurrence last. Only when
  that finds nothing is the answer unparsed (it scores 0). (The GPT-judged task `mmbench_en_dev` asks GPT
  instead and, failing that, draws a random letter; neither runs here.)
- official (VLMEvalKit / MMBench `can_infer_option`): the punctuation `.()[],:;!*#{}` becomes spaces,
  then exactly one present option letter among the words; else exactly one option text. Nothing else is
  guessed: an answer this leaves open is unparsed and scores 0.
`index` must be an integer (a row without one, or with another value, is a bad row with that reason).
Metrics: circular accuracy (a question counts only if every circular copy of it is right; groups by
`index % 1_000_000`) and per-row accuracy, overall and per category, as fractions (LMMs-Eval reports x100).
"""

from __future__ import annotations

import math
import re

from mai.answers import answer_span
from mai.evals.base import BadRow, HubRow, Metric, RowFields, ScoredSample, row_id
from mai.evals.common import (
    HubBenchmark,
    extract_mcq_answer,
    images_from,
    optional_text,
    resolve_profile,
    text_field,
)
from mai.types import AnswerStyle, Sample

LETTERS = ("A", "B", "C", "D", "E")
CIRCULAR_STRIDE = 1_000_000
_PUNCTUATION_TO_SPACE = str.maketrans(".()[],:;!*#{}", " " * 13)
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")  # int64 range; longer digit strings are not indices


class MMBenchBenchmark(HubBenchmark):
    name = "mmbench"
    version = "2"  # 2: lmms-eval resolves what can_infer leaves open with extract_mcq_answer (routing parses)
    agreement_rule = "option_letter"
    required_columns = ("index", "question", "hint", "A", "B", "answer", "category", "image")
    id_column = "index"

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        options = {letter: optional_text(row, letter) for letter in LETTERS}
        present = tuple(letter for letter in LETTERS if options[letter])
        answer = text_field(row, "answer").strip()
        if answer not in present:
            raise BadRow(f"answer '{answer}' is not one of the present options {list(present)}")
        meta = (("hint", optional_text(row, "hint")), ("index", str(_row_index(row))),
                ("letters", "".join(present)))
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=text_field(row, "question"),
                         options=tuple(options[letter] for letter in present), answer=answer, meta=meta,
                         images=images_from(row, self.image_columns, with_images),
                         category=str(row.get("category") or "none"))

    def answer_style(self, sample: Sample) -> AnswerStyle:
        return "letter"

    def format_question(self, sample: Sample) -> str:
        options = "There are several options:\n" + "\n".join(f"{k}. {text}" for k, text in _choices(sample).items())
        hint = sample.get("hint")
        body = f"{hint} {sample.question} {options}" if hint else f"{sample.question} {options}"
        return body + "\n"  # LMMs-Eval's post-prompt starts with a newline: a blank line before it

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        return parse_option(answer_span(text), _choices(sample), resolve_profile(profile, self.profiles))

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        metrics = _circular_and_row(scored, "overall")
        for category in sorted({s.sample.category for s in scored}):
            metrics += _circular_and_row([s for s in scored if s.sample.category == category], f"category={category}")
        unparsed = sum(s.parsed is None for s in scored)
        return metrics + [Metric("unparsed_rate", unparsed / len(scored) if scored else 0.0, len(scored))]


def _choices(sample: Sample) -> dict[str, str]:
    letters = sample.get("letters") or "".join(LETTERS[: len(sample.options)])
    return dict(zip(letters, sample.options))


def _row_index(row: HubRow) -> int:
    """The row's `index`: an integer (circular copies are grouped by `index % 1_000_000`)."""
    value = row.get("index")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise BadRow("column 'index' is missing")
    if isinstance(value, bool):
        raise BadRow(f"column 'index' must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)  # int64 columns read back as float when pandas saw a missing value
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
    raise BadRow(f"column 'index' must be an integer, got {str(value)[:40]!r}")


def parse_option(answer: str, choices: dict[str, str], profile: str = "lmms-eval") -> str | None:
    """The letter a profile reads from an answer (see the module docstring), None when it reads none."""
    letter = infer_option(answer, choices, profile)
    if letter is None and profile == "lmms-eval":
        # eval_sub_data(static_only): build_choices keeps A-D with a value; sorted letters; "" is unparsed
        return extract_mcq_answer(answer, sorted(c for c in choices if c in "ABCD")) or None
    return letter


def infer_option(answer: str, choices: dict[str, str], profile: str = "lmms-eval") -> str | None:
    """`can_infer` of the profile: an option letter, else an option text; None when neither is unique."""
    letter = _letter_lmms_eval(answer) if profile == "lmms-eval" else _letter_official(answer, choices)
    return letter or _option_text(answer, choices)


_AFFIXES = (("", "."), ("", ","), ("", ":"), ("", ")"), ("", ")."), ("(", ")"), ("(", ")."), (":", ""), (":", ","),
            (":", "."), (":", ")"), (":", ")."))


def _letter_lmms_eval(answer: str) -> str | None:
    if "Failed to obtain answer via API" in answer:  # can_infer_option's guard, kept for exactness
        return None
    words = [w.strip() for w in answer.split()]
    present = set(words)  # membership in a set: a long answer is not scanned once per letter and affix
    bare = [c for c in LETTERS if c in present]
    if len(bare) == 1 and not ("A" in present and len(words) > 3):
        return bare[0]
    for prefix, suffix in _AFFIXES:
        marked = [c for c in LETTERS if prefix + c + suffix in present]
        if len(marked) == 1:
            return marked[0]
    return None


def _letter_official(answer: str, choices: dict[str, str]) -> str | None:
    words = [w.strip() for w in answer.translate(_PUNCTUATION_TO_SPACE).split()]
    letters = [letter for letter in choices if letter in words]
    return letters[0] if len(letters) == 1 else None


def _option_text(answer: str, choices: dict[str, str]) -> str | None:
    lowered = answer.lower()
    by_text = [letter for letter, text in choices.items() if letter != "E" and str(text).lower() in lowered]
    return by_text[0] if len(by_text) == 1 else None


def _circular_and_row(scored: list[ScoredSample], subset: str) -> list[Metric]:
    if not scored:
        return []
    groups: dict[int | str, list[float]] = {}
    for item in scored:
        groups.setdefault(_question_key(item.sample), []).append(item.score)
    circular = sum(all(score == 1.0 for score in group) for group in groups.values()) / len(groups)
    per_row = sum(s.score for s in scored) / len(scored)
    return [Metric("circular_accuracy", circular, len(groups), subset), Metric("row_accuracy", per_row, len(scored), subset)]


def _question_key(sample: Sample) -> int | str:
    """The original question of a circular copy. Rows are checked when read (`_row_index`); a sample stored
    without a usable index counts as its own question rather than stopping the aggregate."""
    index = sample.get("index").strip()
    return int(index) % CIRCULAR_STRIDE if _INTEGER.fullmatch(index) else f"sample:{sample.sample_id}"
