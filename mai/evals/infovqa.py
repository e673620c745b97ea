"""InfographicVQA (lmms-lab-encoder/DocVQA, config InfographicVQA, split validation, 2801 rows).

Hub columns: questionId, question, answers (list of accepted answers), answer_type, image, ... .
Prompt: the question + the paper's phrase-style instruction (LMMs-Eval's post-prompt is
"\\nAnswer the question using a single word or phrase."). Metric: ANLS with threshold 0.5, best over the
reference answers. Profiles: `lmms-eval` = `official` (the RRC script: exactly 0.5 is kept, lengths of the
raw strings); `anls-paper` (the published formula: exactly 0.5 gives 0, normalised lengths); see `anls`.
Agreement: ANLS of one answer against the other >= 0.5 (lmms-eval rules).
"""

from __future__ import annotations

from mai.answers import answer_span
from mai.evals.base import BadRow, HubRow, Metric, RowFields, ScoredSample, row_id
from mai.evals.common import (
    PROFILES,
    HubBenchmark,
    anls,
    images_from,
    overall_mean,
    resolve_profile,
    text_field,
    unparsed_rate,
)
from mai.types import Sample

AGREEMENT_THRESHOLD = 0.5


class InfoVQABenchmark(HubBenchmark):
    name = "infovqa"
    version = "1"
    agreement_rule = f"anls>={AGREEMENT_THRESHOLD}"
    required_columns = ("questionId", "question", "answers", "image")
    id_column = "questionId"
    profiles = (*PROFILES, "anls-paper")

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        answers = row.get("answers")
        if not isinstance(answers, (list, tuple)) or not answers or not all(isinstance(a, str) for a in answers):
            raise BadRow("column 'answers' must be a non-empty list of strings")
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=text_field(row, "question"),
                         options=(), answer=answers[0], references=tuple(answers),
                         images=images_from(row, self.image_columns, with_images),
                         category=str(row.get("answer_type") or "none"))

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        return answer_span(text).strip() or None

    def agree(self, a: str | None, b: str | None, sample: Sample) -> bool:
        return a is not None and b is not None and anls(a, (b,), "lmms-eval") >= AGREEMENT_THRESHOLD

    def score(self, parsed: str | None, sample: Sample, profile: str | None = None) -> float:
        chosen = resolve_profile(profile, self.profiles)
        return anls(parsed, sample.references or (sample.answer,), chosen) if parsed is not None else 0.0

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        return overall_mean(scored, "anls") + unparsed_rate(scored)

