"""POPE (lmms-lab-encoder/POPE, split test, 9000 rows): object-presence yes/no questions.

Hub columns: id, question_id, question, answer (yes/no), image_source, image, category
(adversarial / popular / random). Prompt: the question (stripped) + the paper's phrase-style instruction
(LMMs-Eval's own post-prompt is "\\nAnswer the question using a single word or phrase.").

Scoring profiles
- lmms-eval: the prediction (the last `[[...]]`, else the whole output) is lower-cased and stripped; only
  an exact `yes` or `no` counts. Accuracy counts everything else as wrong; precision and recall ignore it
  (a `yes.` is neither a positive nor a negative), so F1 can exceed accuracy.
- official (POPE repository's evaluate.py): keep the first sentence, drop commas, and answer `no` when
  the words contain `No`, `not` or `no`, else `yes`: every output becomes yes or no.
Agreement (mutual verification): both parse (lmms-eval rules) to the same yes/no.
"""

from __future__ import annotations

from mai.answers import answer_span
from mai.evals.base import BadRow, HubRow, Metric, RowFields, ScoredSample, row_id
from mai.evals.common import HubBenchmark, images_from, resolve_profile, text_field
from mai.types import Sample


class PopeBenchmark(HubBenchmark):
    name = "pope"
    version = "1"
    agreement_rule = "yes_no_exact"
    required_columns = ("question_id", "question", "answer", "image", "category")
    id_column = "question_id"

    def parse_row(self, row: HubRow, index: int, with_images: bool = True) -> RowFields:
        answer = text_field(row, "answer").strip().lower()
        if answer not in ("yes", "no"):
            raise BadRow(f"column 'answer' must be yes or no, got '{answer}'")
        return RowFields(sample_id=row_id(self.name, self.id_column, row, index), question=text_field(row, "question"),
                         options=(), answer=answer, images=images_from(row, self.image_columns, with_images),
                         category=str(row.get("category") or "none"))

    def rt_template(self, sample: Sample) -> str:
        return "rt_s2_style"

    def format_question(self, sample: Sample) -> str:
        return sample.question.strip()

    def parse_answer(self, text: str, sample: Sample, profile: str | None = None) -> str | None:
        span = answer_span(text)
        if resolve_profile(profile, self.profiles) == "official":
            return official_yes_no(span)
        candidate = span.lower().strip()
        return candidate if candidate in ("yes", "no") else None

    def aggregate(self, scored: list[ScoredSample], profile: str | None = None) -> list[Metric]:
        chosen = resolve_profile(profile, self.profiles)
        metrics = pope_metrics(scored, "overall", chosen)
        for category in sorted({s.sample.category for s in scored}):
            metrics += pope_metrics([s for s in scored if s.sample.category == category], f"category={category}", chosen)
        unparsed = sum(s.parsed is None for s in scored)
        metrics.append(Metric("unparsed_rate", unparsed / len(scored) if scored else 0.0, len(scored)))
        return metrics


def official_yes_no(text: str) -> str:
    first_sentence = text.split(".")[0] if "." in text else text
    words = first_sentence.replace(",", "").split(" ")
    return "no" if ("No" in words or "not" in words or "no" in words) else "yes"


def pope_metrics(scored: list[ScoredSample], subset: str, profile: str) -> list[Metric]:
    """Accuracy over every sample; precision, recall and F1 over exact yes/no predictions only.
    `yes_ratio` is the share of *reference* yes answers under lmms-eval (its aggregation counts the ground
    truth, a known quirk) and the share of predicted yes under official (the POPE repository)."""
    n = len(scored)
    if n == 0:
        return []
    tp = sum(s.sample.answer == "yes" and s.parsed == "yes" for s in scored)
    fp = sum(s.sample.answer == "no" and s.parsed == "yes" for s in scored)
    fn = sum(s.sample.answer == "yes" and s.parsed == "no" for s in scored)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    counted = (s.sample.answer if profile == "lmms-eval" else s.parsed for s in scored)
    yes_ratio = sum(value == "yes" for value in counted) / n
    accuracy = sum(s.score for s in scored) / n
    return [Metric("accuracy", accuracy, n, subset), Metric("precision", precision, tp + fp, subset),
            Metric("recall", recall, tp + fn, subset), Metric("f1", f1, n, subset),
            Metric("yes_ratio", yes_ratio, n, subset)]
